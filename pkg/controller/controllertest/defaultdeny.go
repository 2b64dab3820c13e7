package controllertest

import (
	"context"
	"slices"
	"sync"
)

// DefaultDeny stands in for the controllers' default-deny ensurer: it records the namespaces
// whose standing deny-all NetworkPolicy a controller asked for, and answers Err.
type DefaultDeny struct {
	Err error

	mu         sync.Mutex
	namespaces []string
}

// Ensure records namespace and answers Err.
func (f *DefaultDeny) Ensure(_ context.Context, namespace string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.namespaces = append(f.namespaces, namespace)
	return f.Err
}

// Asked returns the namespaces asked for, in order.
func (f *DefaultDeny) Asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.namespaces)
}
