//go:build !race

package data

// raceOverhead is how much more memory the race detector's shadow state costs a test
// that measures RSS (none without it).
const raceOverhead = 1
