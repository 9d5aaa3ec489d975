//go:build !linux

package natstest

// memoryRoot is "": StoreDir uses a memory file system only on Linux.
func memoryRoot() string { return "" }
