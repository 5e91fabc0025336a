// Package optim holds PyTorch's optimizers (SGD, Adam, AdamW, RMSprop, Adagrad),
// gradient clipping and learning-rate schedulers.
//
// An optimizer step over all parameters is one call into libtorch, written with ATen's
// multi-tensor (_foreach_*) kernels and PyTorch's arithmetic, or with fused=True (Adam,
// AdamW, SGD) Go over ATen's fused kernels (fused.go), so parameters and state follow
// Python's torch.optim step for step. State dicts use PyTorch's layout
// ("state" keyed by parameter index, "param_groups" with every key PyTorch has), so
//
//	checkpoint.Write(path, torch.ToCheckpoint(opt.StateDict()))
//
// is loaded by Python's optimizer.load_state_dict, and a Python optimizer's state dict
// loads with LoadStateDict. Schedulers likewise compute PyTorch's recursive formulas and
// carry its state-dict keys (last_epoch, base_lrs, _last_lr, _step_count, ...).
//
// As in PyTorch, when resuming, construct the optimizer and its schedulers first, then
// load the optimizer's state dict, then the schedulers'.
package optim
