// Package controllertest has what the tests of airlock's controllers share over client-go's fake
// clientsets.
package controllertest

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
)

// Actions returns the actions of a fake clientset, without list and watch, as
// "verb resource[/subresource] name", in the order they were made.
func Actions(log []core.Action) []string {
	var out []string
	for _, a := range log {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		out = append(out, Describe(a))
	}
	return out
}

// Describe returns an action as "verb resource[/subresource] name".
func Describe(a core.Action) string {
	res := a.GetResource().Resource
	if a.GetSubresource() != "" {
		res += "/" + a.GetSubresource()
	}
	name := ""
	switch a := a.(type) {
	case core.CreateAction:
		name = a.GetObject().(metav1.Object).GetName()
	case core.UpdateAction:
		name = a.GetObject().(metav1.Object).GetName()
	case core.GetAction:
		name = a.GetName()
	case core.DeleteAction:
		name = a.GetName()
	case core.PatchAction:
		name = a.GetName()
	}
	return a.GetVerb() + " " + res + " " + name
}

// reactor is a fake clientset, as far as Record needs it.
type reactor interface {
	PrependReactor(verb, resource string, reaction core.ReactionFunc)
}

// Record appends every action of the clients to *log, in the one order they were made (each
// fake clientset serialises only its own reactors: mu guards the log across them). The actions
// still reach the clients' object trackers.
func Record(mu *sync.Mutex, log *[]core.Action, clients ...reactor) {
	record := func(a core.Action) (bool, runtime.Object, error) {
		mu.Lock()
		*log = append(*log, a)
		mu.Unlock()
		return false, nil, nil
	}
	for _, c := range clients {
		c.PrependReactor("*", "*", record)
	}
}
