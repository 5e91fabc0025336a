//go:build cpu

package serve

// cpuBuild says the tests were built with the cpu tag (make test's first host build).
const cpuBuild = true
