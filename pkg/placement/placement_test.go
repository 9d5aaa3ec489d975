package placement_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbus/agentbus/pkg/placement"
)

func hostIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("host-%d", i+1)
	}
	return ids
}

// counts returns how many partitions each host owns.
func counts(owners []string) map[string]int {
	c := map[string]int{}
	for _, h := range owners {
		c[h]++
	}
	return c
}

func TestEveryHostOwnsItsShare(t *testing.T) {
	for _, tt := range []struct {
		name          string
		partitions, n int
	}{
		{name: "32 over 1", partitions: 32, n: 1},
		{name: "32 over 2", partitions: 32, n: 2},
		{name: "32 over 3", partitions: 32, n: 3},
		{name: "32 over 5", partitions: 32, n: 5},
		{name: "4 over 3", partitions: 4, n: 3},
		{name: "3 over 5: some hosts own none", partitions: 3, n: 5},
		{name: "1024 over 7", partitions: 1024, n: 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hosts := hostIDs(tt.n)
			owners := placement.Assign("Echo", tt.partitions, hosts)
			require.Len(t, owners, tt.partitions)
			c := counts(owners)
			lo, hi := tt.partitions/tt.n, (tt.partitions+tt.n-1)/tt.n
			total := 0
			for _, h := range hosts {
				assert.GreaterOrEqual(t, c[h], lo, "host %s", h)
				assert.LessOrEqual(t, c[h], hi, "host %s", h)
				total += c[h]
			}
			assert.Equal(t, tt.partitions, total, "every partition has one owner among the hosts")
		})
	}
}

func TestAssignmentIsDeterministic(t *testing.T) {
	hosts := hostIDs(4)
	a := placement.Assign("Echo", 32, hosts)
	b := placement.Assign("Echo", 32, []string{hosts[3], hosts[1], hosts[0], hosts[2], hosts[1]})
	assert.Equal(t, a, b, "order and duplicates of the host list change nothing")
	other := placement.Assign("Greeter", 32, hosts)
	assert.NotEqual(t, a, other, "agents are spread independently")
}

// A joining host takes its share and a leaving host's partitions are spread over the rest, with
// only a few other partitions changing hands between the hosts that stay.
func TestMembershipChangesMoveLittle(t *testing.T) {
	const p = 32
	three := placement.Assign("Echo", p, hostIDs(3))
	four := placement.Assign("Echo", p, hostIDs(4))
	moved, toNewcomer := 0, 0
	for i := range p {
		if three[i] != four[i] {
			moved++
			if four[i] == "host-4" {
				toNewcomer++
			}
		}
	}
	assert.Equal(t, p/4, toNewcomer, "the newcomer takes its share")
	assert.LessOrEqual(t, moved, p/4+2, "a join moves little besides the newcomer's share")

	// host-2 leaves: its partitions go to the others, and few others move.
	without := placement.Assign("Echo", p, []string{"host-1", "host-3", "host-4"})
	collateral := 0
	for i := range p {
		assert.NotEqual(t, "host-2", without[i])
		if four[i] != "host-2" && four[i] != without[i] {
			collateral++
		}
	}
	assert.LessOrEqual(t, collateral, 2, "a leave moves little besides the leaver's partitions")
}

func TestNoHosts(t *testing.T) {
	owners := placement.Assign("Echo", 4, nil)
	assert.Equal(t, []string{"", "", "", ""}, owners)
	assert.Empty(t, placement.Owned(owners, "host-1"))
	assert.Empty(t, placement.Assign("Echo", 0, hostIDs(2)))
}

func TestOwned(t *testing.T) {
	owners := []string{"a", "b", "a", "c", "a"}
	assert.Equal(t, []int{0, 2, 4}, placement.Owned(owners, "a"))
	assert.Equal(t, []int{3}, placement.Owned(owners, "c"))
}
