package natstest

import "syscall"

// memoryFS is Linux's memory file system.
const memoryFS = "/dev/shm"

// minMemoryFree is the room memoryFS must have free for StoreDir to use it: a store of a test
// takes a few megabytes, a whole package's at once some tens, and a container's /dev/shm may
// have no more than 64 MiB.
const minMemoryFree = 1 << 30

// memoryRoot is where StoreDir makes stores: memoryFS when it has room, else "".
func memoryRoot() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(memoryFS, &st); err != nil || int64(st.Bavail)*int64(st.Bsize) < minMemoryFree {
		return ""
	}
	return memoryFS
}
