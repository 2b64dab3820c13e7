package claim

import (
	"sync"
	"testing"
)

// TestKeyedLocksExclusivePerKey: holders of one key never overlap, other keys do not wait for
// them, and no entry is left once every holder is done.
func TestKeyedLocksExclusivePerKey(t *testing.T) {
	var k keyedLocks
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside := map[string]int{}
	overlap := false
	for i := range 200 {
		key := []string{"a", "b", "c"}[i%3]
		wg.Go(func() {
			unlock := k.lock(key)
			mu.Lock()
			inside[key]++
			overlap = overlap || inside[key] > 1
			mu.Unlock()
			mu.Lock()
			inside[key]--
			mu.Unlock()
			unlock()
		})
	}
	wg.Wait()
	if overlap {
		t.Error("two holders of one key at once")
	}
	if n := k.len(); n != 0 {
		t.Errorf("%d keys left after every holder unlocked", n)
	}

	// Another key is not held up by a held one.
	unlockA := k.lock("a")
	unlockB := k.lock("b")
	if k.users("a") != 1 || k.users("b") != 1 {
		t.Errorf("users a=%d b=%d, want 1 and 1", k.users("a"), k.users("b"))
	}
	unlockB()
	unlockA()
	if n := k.len(); n != 0 {
		t.Errorf("%d keys left", n)
	}
}
