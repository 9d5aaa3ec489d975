package natstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// StoreDir is a fresh, writable directory, on the memory file system when it has room, removed
// when the test ends; AGENTBUS_TEST_DISK=1 puts it on the disk.
func TestStoreDir(t *testing.T) {
	var dir string
	t.Run("memory", func(t *testing.T) {
		t.Setenv("AGENTBUS_TEST_DISK", "")
		dir = StoreDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o600))
		if memoryRoot() != "" {
			assert.True(t, strings.HasPrefix(dir, memoryRoot()+string(filepath.Separator)), "%s", dir)
		}
		assert.NotEqual(t, dir, StoreDir(t), "each call has its own")
	})
	_, err := os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "%s stays after the test: %v", dir, err)

	t.Run("disk", func(t *testing.T) {
		t.Setenv("AGENTBUS_TEST_DISK", "1")
		dir := StoreDir(t)
		assert.True(t, strings.HasPrefix(dir, os.TempDir()), "%s", dir)
	})
}
