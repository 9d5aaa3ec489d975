package history

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A Cursor remembers the messages of the last request it stored (at most maxStored), not of every
// request: a Cursor cached for a busy conversation stays small.
func TestCursorRemembersOneRequest(t *testing.T) {
	msg := func(req, id string, pos uint64) *Message { return &Message{ID: id, RequestID: req, Pos: pos} }
	var c Cursor
	c.noteRecord([]*Message{msg("r1", "in1", 2), msg("r1", "out1", 3)})
	c.noteRecord([]*Message{msg("r1", "call1", 4)})
	for _, id := range []string{"in1", "out1", "call1"} {
		_, ok := c.position(id)
		assert.True(t, ok, "%s: a message of the request", id)
	}
	c.noteRecord([]*Message{msg("r2", "in2", 10), msg("r2", "out2", 11)})
	_, ok := c.position("in1")
	assert.False(t, ok, "a message of the request before")
	pos, ok := c.position("out2")
	assert.True(t, ok)
	assert.EqualValues(t, 11, pos)
	assert.Len(t, c.stored, 2)

	for i := range 2 * maxStored {
		c.noteRecord([]*Message{msg("r3", fmt.Sprint("m", i), uint64(20+i))})
	}
	assert.Len(t, c.stored, maxStored)
	_, ok = c.position("m0")
	assert.False(t, ok, "the oldest are forgotten past maxStored")
	_, ok = c.position(fmt.Sprint("m", 2*maxStored-1))
	assert.True(t, ok)
}
