//go:build !cpu

package readme

// buildTags are the tags this test was built with (see tags_cpu_test.go).
const buildTags = ""
