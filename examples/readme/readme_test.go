// Package readme holds the test that README.md's Go snippets compile as written.
package readme

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// TestREADMESnippetsBuild extracts every ```go block of README.md and builds it as a
// program of the module, through an overlay, so nothing is written into the tree. A
// snippet must be a whole program (package main), so that a reader can paste it.
func TestREADMESnippetsBuild(t *testing.T) {
	root := testpy.Root()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	blocks := goBlock.FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, blocks, "README.md has Go snippets")
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, b := range blocks {
		src := b[1]
		line := 1 + strings.Count(string(readme[:strings.Index(string(readme), b[0])]), "\n")
		require.True(t, strings.HasPrefix(src, "package main\n"), "README.md:%d: a Go snippet must be a whole program (package main)", line)
		file := filepath.Join(tmp, fmt.Sprintf("snippet%d.go", i))
		require.NoError(t, os.WriteFile(file, []byte(src), 0o644))
		dir := filepath.Join("examples", "readme", fmt.Sprintf("snippet%d", i))
		replace[filepath.Join(root, dir, "main.go")] = file
		pkgs = append(pkgs, "./"+dir)
	}
	ov, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	ovPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(ovPath, ov, 0o644))
	for _, p := range pkgs {
		cmd := exec.Command("go", "build", "-tags="+buildTags, "-overlay", ovPath, "-o", os.DevNull, p)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s (README.md snippet) does not compile:\n%s", p, out)
	}
}
