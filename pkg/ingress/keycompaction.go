package ingress

import (
	"context"
	"sync"
	"time"
)

// DefaultKeyCompactEvery is Config.KeyCompactEvery's default.
const DefaultKeyCompactEvery = time.Hour

// startKeyCompaction takes out of the keys bucket the purge markers that the keys this instance
// removed left there (keys.Store.Compact), one to two rounds of Config.KeyCompactEvery after:
// at each round when it removed keys before the last one, those markers being then at least a
// round old. It returns what stops it.
func (s *Server) startKeyCompaction() func() error {
	every := s.cfg.KeyCompactEvery
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var compacted, removedBefore int64 // removals compacted, and counted at the last round
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if removedBefore != compacted {
				if err := s.keys.Compact(ctx, every); err != nil {
					s.log.Warn("compacting the keys bucket", "err", err)
				} else {
					compacted = removedBefore
				}
			}
			removedBefore = s.keys.Removed()
		}
	}()
	var once sync.Once
	return func() error {
		once.Do(cancel)
		<-done
		return nil
	}
}
