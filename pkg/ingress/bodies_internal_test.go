package ingress

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadAllHoldsNoMoreThanTheBody: a body of its announced length, a power of two, is read
// into a buffer of exactly that capacity (the end found with a one-byte read, not by growing the
// buffer by one byte, a copy of it all), whatever the reader's chunks; a body longer than
// announced, a body that ends early and a reader that fails are read as before.
func TestReadAllHoldsNoMoreThanTheBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4096 bytes
	readers := map[string]func(io.Reader) io.Reader{
		"whole":     func(r io.Reader) io.Reader { return r },
		"one byte":  iotest.OneByteReader,
		"half":      iotest.HalfReader,
		"EOF early": iotest.DataErrReader,
	}
	for name, wrap := range readers {
		t.Run(name, func(t *testing.T) {
			var taken int64
			take := func(n int64) bool { taken += n; return true }

			got, err := readAll(wrap(bytes.NewReader(body)), int64(len(body))+1, take)
			require.NoError(t, err)
			assert.Equal(t, body, got)
			assert.Equal(t, len(body), cap(got), "capacity")
			assert.Equal(t, int64(len(body)), taken, "budget taken")

			// Longer than announced: every byte is read.
			longer := append(bytes.Clone(body), "past"...)
			got, err = readAll(wrap(bytes.NewReader(longer)), int64(len(body))+1, take)
			require.NoError(t, err)
			assert.Equal(t, longer, got)

			// Shorter than announced.
			got, err = readAll(wrap(bytes.NewReader(body[:1000])), int64(len(body))+1, take)
			require.NoError(t, err)
			assert.Equal(t, body[:1000], got)
		})
	}

	failed := errors.New("connection reset")
	_, err := readAll(io.MultiReader(bytes.NewReader(body), iotest.ErrReader(failed)), int64(len(body))+1,
		func(int64) bool { return true })
	assert.ErrorIs(t, err, failed, "a reader failing right after the announced length")

	refused := 0
	_, err = readAll(bytes.NewReader(body), int64(len(body))+1, func(int64) bool { refused++; return refused < 3 })
	assert.ErrorIs(t, err, errBodyBudget, "the budget refuses a growth")
}

// BenchmarkReadAll32MiB reads a 32 MiB body of that announced length (B/op is what its buffers
// allocate).
func BenchmarkReadAll32MiB(b *testing.B) {
	body := make([]byte, 32<<20)
	for b.Loop() {
		if _, err := readAll(bytes.NewReader(body), int64(len(body))+1, func(int64) bool { return true }); err != nil {
			b.Fatal(err)
		}
	}
}
