package operator

import "testing"

func TestChooseGCPercent(t *testing.T) {
	env := func(gogc string) func(string) string {
		return func(key string) string {
			if key == "GOGC" {
				return gogc
			}
			return ""
		}
	}
	if got := chooseGCPercent(env("")); got != operatorGCPercent {
		t.Errorf("GOGC unset: %d, want %d", got, operatorGCPercent)
	}
	if got := chooseGCPercent(env("200")); got != 0 {
		t.Errorf("GOGC=200: %d, want 0 (left as the environment says)", got)
	}
}
