package lora

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// ConfigFile is the adapter's configuration file in its directory, as PEFT names it.
const ConfigFile = "adapter_config.json"

// AllLinear is the target_modules shorthand for every nn.Linear of the model except
// its output head (lm_head).
const AllLinear = "all-linear"

// Targets says which modules get an adapter, as PEFT's target_modules (and
// exclude_modules) do: a list of names, each matching a module whose dotted name is
// that name or ends with "." and that name ("q_proj" matches every
// "model.layers.N.self_attn.q_proj"), or one string: AllLinear, or a regular
// expression the whole dotted name must match (Python's re.fullmatch; Go's RE2 syntax,
// which lacks look-arounds and backreferences). It is a JSON list or string.
type Targets struct {
	Names   []string
	Pattern string
}

// Modules returns Targets for the names.
func Modules(names ...string) Targets { return Targets{Names: names} }

// IsZero reports whether t names nothing (JSON null).
func (t Targets) IsZero() bool { return t.Names == nil && t.Pattern == "" }

// MarshalJSON writes a list, a string or null.
func (t Targets) MarshalJSON() ([]byte, error) {
	switch {
	case t.Names != nil:
		return json.Marshal(t.Names)
	case t.Pattern != "":
		return json.Marshal(t.Pattern)
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads a list of strings, a string or null.
func (t *Targets) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*t = Targets{}
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &t.Pattern)
	}
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("expected a list of module names or a string")
	}
	if names == nil {
		names = []string{}
	}
	t.Names = names
	return nil
}

// matcher is Targets compiled.
type matcher struct {
	t         Targets
	allLinear bool
	re        *regexp.Regexp
}

func (t Targets) compile(field string) (*matcher, error) {
	m := &matcher{t: t}
	switch {
	case t.Names != nil:
		for _, n := range t.Names {
			if n == "" {
				return nil, fmt.Errorf("%s: an empty module name", field)
			}
		}
	case strings.EqualFold(t.Pattern, AllLinear):
		m.allLinear = true
	case t.Pattern != "":
		re, err := regexp.Compile(`^(?:` + t.Pattern + `)$`)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a regular expression gotrain can use: %w", field, t.Pattern, err)
		}
		m.re = re
	}
	return m, nil
}

// match reports whether the module named key is targeted (PEFT's
// check_target_module_exists); AllLinear is decided by the caller, who knows the type.
func (m *matcher) match(key string) bool {
	switch {
	case m.re != nil:
		return m.re.MatchString(key)
	case m.t.Names != nil:
		return slices.ContainsFunc(m.t.Names, func(n string) bool { return isOrEndsWith(key, n) })
	}
	return false
}

// isOrEndsWith reports whether the dotted name key is name or ends with "." and name.
func isOrEndsWith(key, name string) bool { return key == name || strings.HasSuffix(key, "."+name) }

// Init is init_lora_weights: how a new adapter's A and B start.
type Init string

// The initialisations of new adapters gotrain implements.
const (
	// InitDefault is init_lora_weights=true: A Kaiming-uniform with a = √5 (as
	// nn.Linear's weight), B zero, so that a new adapter changes nothing.
	InitDefault Init = "true"
	// InitGaussian is "gaussian": A normal with standard deviation 1/r, B zero.
	InitGaussian Init = "gaussian"
	// InitNone is init_lora_weights=false: A and B both as nn.Linear initialises its
	// weight (the adapter changes the output from the start; for tests).
	InitNone Init = "false"
)

// Config is a LoRA adapter's configuration: PEFT's LoraConfig, as adapter_config.json
// holds it. The zero values of Dropout, UseRSLoRA and Init are PEFT's defaults; R,
// Alpha and TargetModules must be set (PEFT's defaults are r=8, lora_alpha=8).
type Config struct {
	// R is the adapters' rank r: A is [r, in_features], B [out_features, r].
	R int
	// Alpha is lora_alpha; the update B·A is scaled by Alpha/R (Alpha/√R with
	// UseRSLoRA).
	Alpha float64
	// Dropout is lora_dropout, the dropout probability on the adapters' input.
	Dropout float64
	// TargetModules names the modules that get adapters; each must be an nn.Linear.
	TargetModules Targets
	// ExcludeModules names modules that get none, whatever TargetModules says.
	ExcludeModules Targets
	// TargetParameters names parameters that get adapters (PEFT's target_parameters,
	// ParamWrapper): "experts.gate_up_proj" matches the parameter gate_up_proj of every
	// module whose dotted name is or ends with "experts". The module must read the
	// parameter through a hook (ParameterHooker: a mixture of experts' router and
	// experts). A module of TargetModules that is such a module rather than an
	// nn.Linear (the router "gate") gets an adapter on its "weight", as PEFT converts it.
	TargetParameters []string
	// RankPattern and AlphaPattern give some modules or parameters another rank or
	// lora_alpha (PEFT's rank_pattern and alpha_pattern): a key is a regular expression
	// that a module's dotted name (a parameter's: module name, ".", parameter name) must
	// end with after a dot, or be; the first key that matches applies.
	RankPattern  map[string]int
	AlphaPattern map[string]float64
	// UseRSLoRA scales by Alpha/√R (rank-stabilised LoRA) instead of Alpha/R.
	UseRSLoRA bool
	// Init is init_lora_weights ("" is InitDefault).
	Init Init
	// BaseModelNameOrPath is base_model_name_or_path: where the base model comes from
	// (a Hub id or a directory), for whoever loads the adapter.
	BaseModelNameOrPath string
	// TaskType is task_type ("" is "CAUSAL_LM").
	TaskType string
	// Extra holds the keys of a file read that Config has no field for (PEFT writes
	// about forty), written back as they were by Save.
	Extra map[string]json.RawMessage
}

// Scaling returns the factor of the adapters' update: Alpha/R, or Alpha/√R with
// UseRSLoRA.
func (c Config) Scaling() float64 {
	return scaling(c.Alpha, c.R, c.UseRSLoRA)
}

func scaling(alpha float64, r int, rs bool) float64 {
	if rs {
		return alpha / math.Sqrt(float64(r))
	}
	return alpha / float64(r)
}

// rankAlpha returns the rank, alpha and scaling of the adapter of the module or
// parameter key: RankPattern's and AlphaPattern's where one of their keys matches
// (PEFT's get_pattern_key, in sorted key order as PEFT's maps are read from JSON in
// file order), R and Alpha otherwise.
func (c Config) rankAlpha(key string) (int, float64, float64) {
	r, alpha := c.R, c.Alpha
	if k, ok := patternKey(mapKeys(c.RankPattern), key); ok {
		r = c.RankPattern[k]
	}
	if k, ok := patternKey(mapKeys(c.AlphaPattern), key); ok {
		alpha = c.AlphaPattern[k]
	}
	return r, alpha, scaling(alpha, r, c.UseRSLoRA)
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// patternKey returns the first of keys that key matches as re.match(r"(.*\.)?(K)$")
// does.
func patternKey(keys []string, key string) (string, bool) {
	for _, k := range keys {
		if re, err := regexp.Compile(`^(?:.*\.)?(?:` + k + `)$`); err == nil && re.MatchString(key) {
			return k, true
		}
	}
	return "", false
}

// maxRank bounds r far above any adapter in use, so that sizes cannot overflow.
const maxRank = 1 << 16

// validate checks the values gotrain uses; newAdapter also requires an initialisation
// gotrain implements.
func (c Config) validate(newAdapter bool) error {
	switch {
	case c.R < 1 || c.R > maxRank:
		return fmt.Errorf("r %d must be in [1, %d]", c.R, maxRank)
	case math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0):
		return fmt.Errorf("lora_alpha %v must be a finite number", c.Alpha)
	case math.IsNaN(c.Dropout) || c.Dropout < 0 || c.Dropout > 1:
		return fmt.Errorf("lora_dropout %v must be in [0, 1]", c.Dropout)
	case c.TargetModules.IsZero() && len(c.TargetParameters) == 0:
		return fmt.Errorf("target_modules is empty: name the modules to adapt (or %q)", AllLinear)
	case c.TargetModules.Names != nil && len(c.TargetModules.Names) == 0 && len(c.TargetParameters) == 0:
		return fmt.Errorf("target_modules is an empty list")
	case len(c.TargetParameters) > 0 && c.Dropout != 0:
		return fmt.Errorf("lora_dropout %v: adapters on parameters (target_parameters) work without dropout only, as PEFT's ParamWrapper", c.Dropout)
	}
	for k, r := range c.RankPattern {
		if _, err := regexp.Compile(k); err != nil {
			return fmt.Errorf("rank_pattern: %q is not a regular expression gotrain can use: %w", k, err)
		}
		if r < 1 || r > maxRank {
			return fmt.Errorf("rank_pattern %q: r %d must be in [1, %d]", k, r, maxRank)
		}
	}
	for k, a := range c.AlphaPattern {
		if _, err := regexp.Compile(k); err != nil {
			return fmt.Errorf("alpha_pattern: %q is not a regular expression gotrain can use: %w", k, err)
		}
		if math.IsNaN(a) || math.IsInf(a, 0) {
			return fmt.Errorf("alpha_pattern %q: lora_alpha %v must be a finite number", k, a)
		}
	}
	for _, p := range c.TargetParameters {
		if p == "" || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") {
			return fmt.Errorf("target_parameters: %q is not a parameter name", p)
		}
	}
	switch c.Init {
	case "", InitDefault, InitGaussian, InitNone:
	default:
		if newAdapter {
			return fmt.Errorf("init_lora_weights %q is not implemented (true, false, %q)", c.Init, InitGaussian)
		}
		if baseChangingInit(string(c.Init)) {
			return fmt.Errorf("init_lora_weights %q adapters expect the base weights their initialisation changed; convert the adapter to plain LoRA with PEFT (path_initial_model_for_weight_conversion) first", c.Init)
		}
	}
	return nil
}

// baseChangingInit reports whether an initialisation rewrites the base weights (an
// adapter made with it only works on that changed base).
func baseChangingInit(init string) bool {
	for _, p := range []string{"pissa", "olora", "corda", "loftq"} {
		if strings.HasPrefix(strings.ToLower(init), p) {
			return true
		}
	}
	return false
}

// unsupported lists adapter_config.json keys whose non-default value changes the
// adapter in a way gotrain does not implement, with what the default looks like.
var unsupported = []struct {
	key, what string
	isDefault func(json.RawMessage) bool
}{
	{"use_dora", "DoRA", isFalse},
	{"lora_bias", "a bias on lora_B", isFalse},
	{"modules_to_save", "modules trained and saved in full", isEmpty},
	{"layers_to_transform", "adapters on chosen layers only", isEmpty},
	{"trainable_token_indices", "trainable token embeddings", isEmpty},
	{"layer_replication", "replicated layers", isEmpty},
	{"alora_invocation_tokens", "activated LoRA", isEmpty},
	{"use_qalora", "QA-LoRA", isFalse},
	{"use_bdlora", "block-diagonal LoRA", isFalse},
	{"arrow_config", "Arrow routing", isEmpty},
	{"kasa_config", "KaSA", isEmpty},
	{"velora_config", "VeLoRA", isEmpty},
	{"monteclora_config", "MonteCLoRA", isEmpty},
}

func isFalse(v json.RawMessage) bool {
	s := string(bytes.TrimSpace(v))
	return s == "false" || s == "null"
}

func isEmpty(v json.RawMessage) bool {
	s := string(bytes.TrimSpace(v))
	return s == "null" || s == "{}" || s == "[]" || s == `""`
}

// ParseConfig reads adapter_config.json's bytes. Keys it has no field for are kept in
// Extra; a key whose value asks for something gotrain does not implement (DoRA,
// modules_to_save, rank_pattern, ...) is an error naming it.
func ParseConfig(raw []byte) (Config, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return Config{}, err
	}
	if all == nil {
		return Config{}, fmt.Errorf("expected a JSON object")
	}
	// r and lora_alpha default to LoraConfig's defaults when absent.
	c := Config{R: 8, Alpha: 8, Extra: map[string]json.RawMessage{}}
	take := func(key string, into any, required bool) error {
		v, ok := all[key]
		delete(all, key)
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			if required {
				return fmt.Errorf("%s is missing", key)
			}
			return nil
		}
		if err := json.Unmarshal(v, into); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	}
	var peftType, bias string
	var init json.RawMessage
	var fanInFanOut bool
	for _, f := range []struct {
		key      string
		into     any
		required bool
	}{
		{"peft_type", &peftType, true},
		{"r", &c.R, false},
		{"lora_alpha", &c.Alpha, false},
		{"lora_dropout", &c.Dropout, false},
		{"target_modules", &c.TargetModules, false},
		{"target_parameters", &c.TargetParameters, false},
		{"rank_pattern", &c.RankPattern, false},
		{"alpha_pattern", &c.AlphaPattern, false},
		{"exclude_modules", &c.ExcludeModules, false},
		{"use_rslora", &c.UseRSLoRA, false},
		{"init_lora_weights", &init, false},
		{"base_model_name_or_path", &c.BaseModelNameOrPath, false},
		{"task_type", &c.TaskType, false},
		{"bias", &bias, false},
		// fan_in_fan_out describes Conv1D weights; PEFT ignores it for nn.Linear.
		{"fan_in_fan_out", &fanInFanOut, false},
	} {
		if err := take(f.key, f.into, f.required); err != nil {
			return Config{}, err
		}
	}
	if c.TargetModules.IsZero() && len(c.TargetParameters) == 0 {
		return Config{}, fmt.Errorf("target_modules is missing")
	}
	if peftType != "LORA" {
		return Config{}, fmt.Errorf("peft_type %q is not LORA", peftType)
	}
	if bias != "" && bias != "none" {
		return Config{}, fmt.Errorf("bias %q: only \"none\" is supported (trained biases are not)", bias)
	}
	if len(init) > 0 {
		s := string(bytes.TrimSpace(init))
		switch s {
		case "true":
			c.Init = InitDefault
		case "false":
			c.Init = InitNone
		default:
			var name string
			if err := json.Unmarshal(init, &name); err != nil {
				return Config{}, fmt.Errorf("init_lora_weights: expected true, false or a name")
			}
			c.Init = Init(name)
		}
	}
	for _, u := range unsupported {
		if v, ok := all[u.key]; ok && !u.isDefault(v) {
			return Config{}, fmt.Errorf("%s %s: %s is not supported", u.key, bytes.TrimSpace(v), u.what)
		}
	}
	maps.Copy(c.Extra, all)
	return c, nil
}

// marshal writes c as adapter_config.json: PEFT's keys (sorted, as PEFT writes them),
// Extra's keys as they were read, and targets as given (the caller expands AllLinear).
func (c Config) marshal(targets Targets) ([]byte, error) {
	out := map[string]any{}
	for k, v := range c.Extra {
		out[k] = v
	}
	var base any
	if c.BaseModelNameOrPath != "" {
		base = c.BaseModelNameOrPath
	}
	task := c.TaskType
	if task == "" {
		task = "CAUSAL_LM"
	}
	var init any = true
	switch c.Init {
	case InitNone:
		init = false
	case "", InitDefault:
	default:
		init = string(c.Init)
	}
	maps.Copy(out, map[string]any{
		"peft_type":               "LORA",
		"task_type":               task,
		"r":                       c.R,
		"lora_alpha":              c.Alpha,
		"lora_dropout":            c.Dropout,
		"target_modules":          targets,
		"target_parameters":       c.TargetParameters,
		"exclude_modules":         c.ExcludeModules,
		"use_rslora":              c.UseRSLoRA,
		"init_lora_weights":       init,
		"base_model_name_or_path": base,
		"bias":                    "none",
		"fan_in_fan_out":          false,
		"modules_to_save":         nil,
		"use_dora":                false,
		"lora_bias":               false,
		"layers_to_transform":     nil,
		"layers_pattern":          nil,
		"rank_pattern":            orEmpty(c.RankPattern),
		"alpha_pattern":           orEmpty(c.AlphaPattern),
		"inference_mode":          true,
	})
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// orEmpty returns m, or an empty map for nil (PEFT writes {}).
func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
