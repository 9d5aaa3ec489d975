// Package placement decides which workflow host owns which inbox partition of an agent.
//
// Every host of an agent computes the same answer from the same inputs (the agent's name, its
// partition count and the ids of its live hosts), so the hosts agree on the division without
// talking to each other: membership comes from heartbeats (package registry), and this package
// only turns a membership into an assignment.
//
// The rule is rendezvous hashing with capacities. With N hosts and P partitions every host owns
// ⌊P/N⌋ or ⌈P/N⌉ partitions, and a change of membership moves few partitions: a host that joins
// takes its share from the others, and the partitions of a host that leaves are spread over the
// rest. Because every host's capacity changes with N, a few more partitions change hands between
// hosts that stay (with 32 partitions and 3 to 6 hosts, one or two on average, at most six in a
// sample of 200 agents). Exact balance and no collateral move at all cannot both hold for a rule
// that knows only the membership; moving a partition is safe, only a little slower.
//
// It does not hand partitions over; the workflow host (package agent) does that.
package placement

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
)

// Assign returns the owner of each of the agent's partitions 0..partitions-1, by host id. With
// no hosts every owner is "". Duplicate ids count once; the order of hosts does not matter.
func Assign(agent string, partitions int, hosts []string) []string {
	owners := make([]string, max(partitions, 0))
	hosts = slices.Clone(hosts)
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	if len(hosts) == 0 || partitions <= 0 {
		return owners
	}

	// Capacities: every host takes ⌊P/N⌋; the P mod N hosts that rank first for the agent take
	// one more. Ranking by a hash rather than by id spreads the extra partitions of different
	// agents over different hosts.
	n := len(hosts)
	capacity := make(map[string]int, n)
	byRank := slices.Clone(hosts)
	slices.SortFunc(byRank, func(a, b string) int {
		return cmp.Or(cmp.Compare(score(agent, -1, b), score(agent, -1, a)), cmp.Compare(a, b))
	})
	for i, h := range byRank {
		capacity[h] = partitions / n
		if i < partitions%n {
			capacity[h]++
		}
	}

	// Every (partition, host) pair has a score; the highest scores win, as long as the host has
	// room. A partition goes to its top-scoring host unless that host is full, so a membership
	// change only moves what it must.
	type pair struct {
		p     int
		host  string
		score uint64
	}
	pairs := make([]pair, 0, partitions*n)
	for p := range partitions {
		for _, h := range hosts {
			pairs = append(pairs, pair{p, h, score(agent, p, h)})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.p, b.p), cmp.Compare(a.host, b.host))
	})
	left := partitions
	for _, pr := range pairs {
		if owners[pr.p] != "" || capacity[pr.host] == 0 {
			continue
		}
		owners[pr.p] = pr.host
		capacity[pr.host]--
		if left--; left == 0 {
			break
		}
	}
	return owners
}

// Owned returns the partitions owners gives to host, in increasing order.
func Owned(owners []string, host string) []int {
	var mine []int
	for p, h := range owners {
		if h == host {
			mine = append(mine, p)
		}
	}
	return mine
}

// score is the rendezvous weight of host for the agent's partition p (p = -1 ranks hosts for
// the extra capacity). FNV-1a is stable across processes and versions, which the rule needs:
// every host must compute the same weights.
func score(agent string, p int, host string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(agent))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(strconv.AppendInt(nil, int64(p), 10))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(host))
	return mix(h.Sum64())
}

// mix is splitmix64's finaliser: FNV's low bits are weak for short inputs that differ only at
// their end, such as consecutive partition numbers.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
