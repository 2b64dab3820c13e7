// Command etcd is etcd v3.6 built from the Go module proxy for hack/local-cluster.sh.
// etcd's server module carries replace directives, so `go install` of it fails; this
// wrapper module pins the etcd modules at one version and calls etcdmain instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
