// Package controllertest has what the tests of airlock's controllers share over client-go's fake
// clientsets.
package controllertest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
