package nn

import (
	"fmt"
	"strconv"
	"strings"
)

// ReplaceModule puts m in place of the submodule registered at path inside root (a
// dotted name as NamedModules gives it: "model.layers.0.self_attn.q_proj"), under the
// same name and at the same position, and returns the module it replaced. A Sequential
// or ModuleList parent runs or lists m from then on, as PyTorch's setattr on the parent
// does; a Sequential's new stage must be a Layer.
//
// A model's own struct fields that point to the old module still point to it: Go has no
// setattr to redirect them. Adapters that wrap a Linear (LoRA) set the old Linear's
// Wrapper to the new module, so that calls through those fields reach it too.
func ReplaceModule(root Module, path string, m Module) (Module, error) {
	if root == nil || m == nil {
		return nil, fmt.Errorf("nn: ReplaceModule %q: nil module", path)
	}
	if path == "" {
		return nil, fmt.Errorf("nn: ReplaceModule: an empty path names the root, which has no parent to replace it in")
	}
	parts := strings.Split(path, ".")
	parent := root
	for i, name := range parts[:len(parts)-1] {
		c := parent.ModuleBase().Child(name)
		if c == nil {
			return nil, fmt.Errorf("nn: ReplaceModule %q: no submodule %q", path, strings.Join(parts[:i+1], "."))
		}
		parent = c
	}
	name := parts[len(parts)-1]
	b := parent.ModuleBase()
	for i := range b.children {
		if b.children[i].name != name {
			continue
		}
		old := b.children[i].m
		// A Sequential's or ModuleList's children are named by their index in mods.
		j, _ := strconv.Atoi(name)
		switch p := parent.(type) {
		case *Sequential:
			l, ok := m.(Layer)
			if !ok {
				return nil, fmt.Errorf("nn: ReplaceModule %q: a Sequential's stage must be a Layer; %T has no Forward(x)", path, m)
			}
			p.mods[j] = l
		case *ModuleList:
			p.mods[j] = m
		}
		b.children[i].m = m
		return old, nil
	}
	return nil, fmt.Errorf("nn: ReplaceModule %q: no submodule %q", path, path)
}
