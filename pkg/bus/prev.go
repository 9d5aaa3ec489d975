package bus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agentbus/agentbus/pkg/subject"
)

// PrevDepth is how many previous sequences a subject.HeaderPrev header lists. History records
// and run index entries chain their subject's earlier messages this way, so that the newest
// page of a subject is one last-by-subject get plus direct gets of the sequences listed.
const PrevDepth = 32

// FormatPrev is the subject.HeaderPrev value of the message after last: last, then prev, at
// most PrevDepth sequences.
func FormatPrev(last uint64, prev []uint64) string {
	b := make([]byte, 0, 8*PrevDepth)
	b = strconv.AppendUint(b, last, 10)
	for _, p := range prev[:min(len(prev), PrevDepth-1)] {
		b = append(b, ',')
		b = strconv.AppendUint(b, p, 10)
	}
	return string(b)
}

// ParsePrev reads a message's subject.HeaderPrev header: nil when absent, at most PrevDepth
// sequences.
func ParsePrev(h nats.Header) ([]uint64, error) {
	v := h.Get(subject.HeaderPrev)
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	out := make([]uint64, 0, min(len(parts), PrevDepth))
	for _, p := range parts[:min(len(parts), PrevDepth)] {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("bad %s header %q", subject.HeaderPrev, v)
		}
		out = append(out, n)
	}
	return out, nil
}
