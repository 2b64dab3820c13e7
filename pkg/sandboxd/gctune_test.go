package sandboxd

import "testing"

// TestChooseGCSettings checks sandboxd's garbage collector settings: its
// GOGC and half the container's memory limit as a soft limit, each unless
// the environment sets its own.
func TestChooseGCSettings(t *testing.T) {
	for _, c := range []struct {
		name      string
		env       map[string]string
		memoryMax string
		want      gcSettings
	}{
		{name: "no cgroup file", want: gcSettings{percent: sandboxdGCPercent}},
		{name: "no limit", memoryMax: "max\n", want: gcSettings{percent: sandboxdGCPercent}},
		{name: "a limit", memoryMax: "1073741824\n", want: gcSettings{percent: sandboxdGCPercent, memoryLimit: 512 << 20}},
		{name: "garbage", memoryMax: "lots\n", want: gcSettings{percent: sandboxdGCPercent}},
		{name: "GOGC set", env: map[string]string{"GOGC": "100"}, memoryMax: "1073741824", want: gcSettings{memoryLimit: 512 << 20}},
		{name: "GOGC off", env: map[string]string{"GOGC": "off"}, want: gcSettings{}},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "300MiB"}, memoryMax: "1073741824", want: gcSettings{percent: sandboxdGCPercent}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := chooseGCSettings(func(k string) string { return c.env[k] }, []byte(c.memoryMax))
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
