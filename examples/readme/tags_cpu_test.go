//go:build cpu

package readme

// buildTags are the tags this test was built with, for the snippets' build: the
// same tags reuse the build cache's libtorch binding.
const buildTags = "cpu"
