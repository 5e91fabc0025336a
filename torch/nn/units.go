package nn

import "github.com/gotrain/gotrain/torch"

// UnitHooks run around the forward of a module's units (a decoder's layers): sharded
// training gathers a unit's parameters before its forward, and after it frees them and
// puts a node on its output that gathers them again for its backward.
type UnitHooks interface {
	// BeforeUnit runs before unit i's forward.
	BeforeUnit(i int)
	// AfterUnit runs after unit i's forward with its output, and returns the output the
	// module goes on with.
	AfterUnit(i int, out *torch.Tensor) *torch.Tensor
}

// UnitHooker is a module that runs UnitHooks around its units. SetUnitHooks installs h
// (nil removes it) and returns the units' paths relative to the module, unit i at i.
type UnitHooker interface {
	SetUnitHooks(h UnitHooks) []string
}
