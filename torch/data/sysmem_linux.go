package data

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// physicalMemory is the memory this process can use, in bytes: the machine's RAM, or
// less under an address-space limit (ulimit -v) or a cgroup's memory.max.
var physicalMemory = sync.OnceValue(func() int64 {
	mem := int64(8 << 30) // when nothing can be read
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil && si.Totalram > 0 {
		mem = satMul(int64(si.Totalram), max(int64(si.Unit), 1))
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) == nil && rl.Cur > 0 && rl.Cur < math.MaxInt64 {
		mem = min(mem, int64(rl.Cur))
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			mem = min(mem, v)
		}
	}
	return mem
})

// Linux's lseek whences for sparse files.
const (
	seekData = 3
	seekHole = 4
)

// dataExtent returns the next region of f at or after off that may hold data, [start,
// end), skipping holes (which read as zeros) where the file system reports them; ok is
// false when no data follows off.
func dataExtent(f *os.File, off, size int64) (start, end int64, ok bool) {
	start, err := f.Seek(off, seekData)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return 0, 0, false // only a hole from off to the end
		}
		return off, size, off < size // no hole reporting: read everything
	}
	end, err = f.Seek(start, seekHole)
	if err != nil || end > size {
		end = size
	}
	return start, end, start < size
}
