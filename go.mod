module github.com/corralhq/corral

go 1.26.8

require github.com/corralhq/corral/sandbox v0.0.0

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/moby/profiles/seccomp v0.3.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/corralhq/corral/sandbox => ./sandbox
