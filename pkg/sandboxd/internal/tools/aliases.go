package tools

import "fmt"

// Some tools take a field under two names: airlock's and the one agents
// written for CodeGen-Sandbox or Claude Code send (docs/sandboxd-tools.md,
// "Field names" lists them).

// oneOf returns the value of two fields that mean the same thing: the one
// given, or both when they are equal; two different values are an error
// the model can read, so that nothing is guessed.
func oneOf[T comparable](field string, value T, alias string, aliasValue T) (T, error) {
	var zero T
	switch {
	case value == zero:
		return aliasValue, nil
	case aliasValue == zero || aliasValue == value:
		return value, nil
	default:
		return zero, fmt.Errorf("%s %v and %s %v differ: they are the same field, give one", field, quoted(value), alias, quoted(aliasValue))
	}
}

func quoted(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}
