package warmpool

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// memberExpectations are the members created and not yet seen in the cache: they count as
// starting, so that a sync over a cache that lacks them does not create more.
type memberExpectations struct {
	clock clock.Clock
	mu    sync.Mutex
	at    map[string]memberCreated // namespace/name
}

type memberCreated struct {
	pool string
	at   time.Time
}

func newMemberExpectations(clk clock.Clock) *memberExpectations {
	return &memberExpectations{clock: clk, at: map[string]memberCreated{}}
}

func (e *memberExpectations) expect(namespace, name, pool string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at[namespace+"/"+name] = memberCreated{pool: pool, at: e.clock.Now()}
}

func (e *memberExpectations) seen(namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.at, namespace+"/"+name)
}

// pending counts the members of pool in namespace created and not seen, forgetting those
// older than memberCreateExpiry.
func (e *memberExpectations) pending(namespace, pool string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	now := e.clock.Now()
	for k, v := range e.at {
		if now.Sub(v.at) > memberCreateExpiry {
			delete(e.at, k)
			continue
		}
		if v.pool == pool && len(k) > len(namespace) && k[:len(namespace)+1] == namespace+"/" {
			n++
		}
	}
	return n
}
