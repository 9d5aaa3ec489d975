// Package gostack reads the stacks of the running goroutines, for tests that count or show what
// a process runs.
package gostack

import (
	"runtime"
	"strings"
)

// All returns the stack of every goroutine running now, one string each, as runtime.Stack
// writes them.
func All() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Naming returns the stacks of All that contain one of the strings (a package path, a
// function name).
func Naming(naming ...string) []string { return Filter(All(), naming...) }

// Filter returns the stacks that contain one of the strings.
func Filter(stacks []string, naming ...string) []string {
	var kept []string
	for _, g := range stacks {
		for _, s := range naming {
			if strings.Contains(g, s) {
				kept = append(kept, g)
				break
			}
		}
	}
	return kept
}
