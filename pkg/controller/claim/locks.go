package claim

import "sync"

// keyedLocks is one mutex per key (a namespace), held only while it is used: an entry is removed
// when its last holder or waiter unlocks, so namespaces that come and go leave nothing behind.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu    sync.Mutex
	users int // holders and waiters
}

// lock blocks until key's mutex is held, and returns the function that releases it.
func (k *keyedLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*keyedLock)
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()

	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.users--
		if l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// users is the number of holders and waiters of key's mutex; for tests.
func (k *keyedLocks) users(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.locks[key]; l != nil {
		return l.users
	}
	return 0
}

// len is the number of keys in use; for tests.
func (k *keyedLocks) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
