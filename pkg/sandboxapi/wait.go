package sandboxapi

import (
	"sync"

	"k8s.io/client-go/tools/cache"
)

// waiters wakes the acquires that wait for a claim to change. The claim informer's event handler
// only notifies it; a woken acquire reads the listers again. Keys are "<namespace>/<name>".
type waiters struct {
	mu    sync.Mutex
	byKey map[string]map[*waiter]struct{}
}

// waiter is one waiting acquire. Its channel holds at most one pending wake-up: a waiter that is
// slow to look misses nothing, since it re-reads the cache whatever woke it.
type waiter struct {
	keys []string
	c    chan struct{}
}

func newWaiters() *waiters {
	return &waiters{byKey: make(map[string]map[*waiter]struct{})}
}

// watch registers a waiter for changes of any of keys. Call it before reading the cache, so that
// a change between the read and the wait is not missed; stop it with unwatch.
func (ws *waiters) watch(keys ...string) *waiter {
	w := &waiter{keys: keys, c: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, k := range keys {
		set := ws.byKey[k]
		if set == nil {
			set = make(map[*waiter]struct{})
			ws.byKey[k] = set
		}
		set[w] = struct{}{}
	}
	return w
}

func (ws *waiters) unwatch(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, k := range w.keys {
		set := ws.byKey[k]
		delete(set, w)
		if len(set) == 0 {
			delete(ws.byKey, k)
		}
	}
}

// notify wakes every waiter of key, without blocking.
func (ws *waiters) notify(key string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.byKey[key] {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

// count returns how many waiters wait on key: for tests.
func (ws *waiters) count(key string) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byKey[key])
}

// eventHandler notifies the key of every added, changed or deleted object (tombstones included).
// Resyncs, which change nothing, are skipped.
func (ws *waiters) eventHandler() cache.ResourceEventHandler {
	notifyObj := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			ws.notify(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { notifyObj(obj) },
		UpdateFunc: func(old, cur any) {
			if o, ok := old.(interface{ GetResourceVersion() string }); ok {
				if c, ok := cur.(interface{ GetResourceVersion() string }); ok && o.GetResourceVersion() == c.GetResourceVersion() {
					return
				}
			}
			notifyObj(cur)
		},
		DeleteFunc: notifyObj,
	}
}
