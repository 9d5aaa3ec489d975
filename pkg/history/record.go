package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
)

// A record is one message of the history stream. It holds one Message (its JSON object), or the
// two messages of an exchange, a request and its reply, stored at once (a JSON array of the two,
// oldest first): one store and one acknowledgement instead of two.
//
// A message's position (Message.Pos) is twice the stream sequence of its record, plus one for
// the second message of an exchange: positions grow with time, and tell a record's messages
// apart.

// maxExchangeBytes bounds the encoded size of a two-message record, well below the NATS default
// max payload (1 MiB): two larger messages are stored as two records.
const maxExchangeBytes = 512 << 10

// position is the position of the part'th message of the record at seq.
func position(seq uint64, part int) uint64 { return seq<<1 | uint64(part) }

// recordSeq is the stream sequence of the record holding the message at pos.
func recordSeq(pos uint64) uint64 { return pos >> 1 }

// encodeRecord appends msgs (one or two) to dst as one record.
func encodeRecord(dst []byte, msgs []*Message) ([]byte, error) {
	if len(msgs) == 1 {
		return msgs[0].AppendJSON(dst) // directly: json.Marshal would validate the output once more
	}
	b := append(dst, '[')
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = m.AppendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// recordBufs holds buffers to encode records in: publishing copies a record into the
// connection's buffer, so its buffer serves the next one.
var recordBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxPooledRecord bounds the buffers kept in recordBufs; larger ones are left to the GC.
const maxPooledRecord = 64 << 10

// decodeRecord decodes the record at seq into its messages, oldest first, with their positions.
func decodeRecord(seq uint64, data []byte) ([]Message, error) {
	if bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("[")) {
		var msgs []Message
		if err := json.Unmarshal(data, &msgs); err != nil {
			return nil, err
		}
		if len(msgs) == 0 || len(msgs) > 2 {
			return nil, fmt.Errorf("a record holds %d messages, want 1 or 2", len(msgs))
		}
		for i := range msgs {
			msgs[i].Pos = position(seq, i)
		}
		return msgs, nil
	}
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	m.Pos = position(seq, 0)
	return []Message{m}, nil
}

// DecodeRecord reads one message of the history stream, stored at seq, into the messages it
// holds (one, or the two of an exchange), oldest first, with their positions.
func DecodeRecord(seq uint64, data []byte) ([]Message, error) { return decodeRecord(seq, data) }
