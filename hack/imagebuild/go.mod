// Module imagebuild writes container images without Docker or a registry (hack/local-node.sh).
// Standard library only; kept out of the main module.
module github.com/airlock-dev/airlock/hack/imagebuild

go 1.26.0
