module github.com/corralhq/corral/sandbox

go 1.24
