// Package handlers keeps the event handlers a controller adds to shared informers, so that the
// controller removes them when it stops: the informers are shared and outlive the controller (a
// replica that lost the lease builds new controllers on them when it leads again), and a stopped
// controller's handlers must not go on being called.
package handlers

import (
	"fmt"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
)

// Registrations are the event handlers a controller added. The zero value is ready to use; it is
// not safe for concurrent use (controllers add their handlers in their constructor, and remove
// them when Run returns).
type Registrations struct {
	regs []registration
}

type registration struct {
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
}

// Add adds handler to informer and remembers it.
func (r *Registrations) Add(informer cache.SharedIndexInformer, handler cache.ResourceEventHandler) error {
	reg, err := informer.AddEventHandler(handler)
	if err != nil {
		return err
	}
	r.regs = append(r.regs, registration{informer: informer, reg: reg})
	return nil
}

// RemoveAll removes every handler Add added.
func (r *Registrations) RemoveAll() {
	for _, x := range r.regs {
		if err := x.informer.RemoveEventHandler(x.reg); err != nil {
			utilruntime.HandleError(fmt.Errorf("removing an event handler: %w", err))
		}
	}
	r.regs = nil
}
