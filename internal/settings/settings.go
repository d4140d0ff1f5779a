// Package settings is what every package that owns a table of the TOML
// configuration shares: the rows of a table of checks (a key, what it
// accepts in words, the test), the common tests, and the walk over a
// table's keys. A package declares its table's struct with toml tags, its
// defaults and its checks; pipeline.Config embeds the tables and lifts
// their checks into Validate's one table, beside the rows that relate keys
// of different tables (and experiments.File embeds pipeline.Config and
// lifts its table in turn).
package settings

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// A Check is one row of a table of checks over T: the dotted key it
// checks, what the key accepts in words (docs/config.md's table of checked
// values and the flags' help show it), and the test, which returns nil or
// why the value is refused.
type Check[T any] struct {
	Key     string
	Accepts func() string
	Test    func(T) error
}

// Run runs every check over t and joins the refusals, one per line, each
// naming its key.
func Run[T any](t T, checks []Check[T]) error {
	var errs []error
	for _, ck := range checks {
		err := ck.Test(t)
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			errs = append(errs, joined.Unwrap()...)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lift turns the checks of one table into checks of the struct that holds
// it: get picks the table out of the whole.
func Lift[T, U any](checks []Check[U], get func(T) U) []Check[T] {
	out := make([]Check[T], len(checks))
	for i, ck := range checks {
		test := ck.Test
		out[i] = Check[T]{ck.Key, ck.Accepts, func(t T) error { return test(get(t)) }}
	}
	return out
}

// Accepts is what the checks accept for key, in words, the rows' joined
// ("" when no row checks the key): the commands' help shows it beside a
// config flag.
func Accepts[T any](checks []Check[T], key string) string {
	var out []string
	for _, ck := range checks {
		if ck.Key == key {
			out = append(out, ck.Accepts())
		}
	}
	return strings.Join(out, "; ")
}

// Table is the checks as Markdown, one row per key (in the order of its
// first row) with what it accepts: docs/config.md's table of checked values.
func Table[T any](checks []Check[T]) string {
	var b strings.Builder
	b.WriteString("| key | accepts |\n|---|---|\n")
	var keys []string
	accepts := map[string][]string{}
	for _, ck := range checks {
		if _, seen := accepts[ck.Key]; !seen {
			keys = append(keys, ck.Key)
		}
		accepts[ck.Key] = append(accepts[ck.Key], ck.Accepts())
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %s |\n", k, strings.Join(accepts[k], "; "))
	}
	return b.String()
}

// Refuse is a check's error: the key, then the problem.
func Refuse(key, format string, args ...any) error {
	return fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...))
}

// Text is an Accepts that is always s.
func Text(s string) func() string { return func() string { return s } }

// NotFinite refuses NaN and infinities.
func NotFinite(key string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return Refuse(key, "%v is not a finite number", v)
	}
	return nil
}

// AtLeast accepts lo or more; what is the message ("want ...").
func AtLeast[T any](key string, v func(T) int, lo int, what string) Check[T] {
	return Check[T]{key, Text(strings.TrimPrefix(what, "want ")), func(t T) error {
		if x := v(t); x < lo {
			return Refuse(key, "%d: %s", x, what)
		}
		return nil
	}}
}

// AtMost bounds what would exhaust memory before any result.
func AtMost[T any](key string, v func(T) int, hi int) Check[T] {
	return Check[T]{key, Text(fmt.Sprintf("at most %d", hi)), func(t T) error {
		if x := v(t); x > hi {
			return Refuse(key, "%d: at most %d (more would exhaust memory before any result)", x, hi)
		}
		return nil
	}}
}

// InRange accepts a finite value from lo to hi.
func InRange[T any](key string, v func(T) float64, lo, hi float64, what string) Check[T] {
	return Check[T]{key, Text(strings.TrimPrefix(what, "want ")), func(t T) error {
		x := v(t)
		if err := NotFinite(key, x); err != nil {
			return err
		}
		if x < lo || x > hi {
			return Refuse(key, "%v: %s", x, what)
		}
		return nil
	}}
}

// Positive accepts a finite value above 0.
func Positive[T any](key string, v func(T) float64, what string) Check[T] {
	return Check[T]{key, Text(strings.TrimPrefix(what, "want ")), func(t T) error {
		x := v(t)
		if err := NotFinite(key, x); err != nil {
			return err
		}
		if x <= 0 {
			return Refuse(key, "%v: %s", x, what)
		}
		return nil
	}}
}

// OneOf accepts the names of a registry.
func OneOf[T any](key string, v func(T) string, known func() []string) Check[T] {
	return Check[T]{key, func() string { return "one of " + strings.Join(known(), ", ") }, func(t T) error {
		return KnownName(key, v(t), known())
	}}
}

// KnownName refuses a name that is not in known, suggesting the nearest.
func KnownName(key, v string, known []string) error {
	if !slices.Contains(known, v) {
		return Refuse(key, "unknown name %q%s (known: %s)", v, DidYouMean(v, known), strings.Join(known, ", "))
	}
	return nil
}

// Wrap turns a checking function's error into a check's.
func Wrap[T any](key, accepts string, f func(T) error) Check[T] {
	return Check[T]{key, Text(accepts), func(t T) error {
		if err := f(t); err != nil {
			return Refuse(key, "%v", err)
		}
		return nil
	}}
}

// Keys are the dotted TOML keys of a configuration struct, with the value
// each has in v, in field order: a struct field is a table (its tag the
// prefix), an embedded struct's fields are its holder's.
func Keys(v any) []Key {
	var keys []Key
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			fv := v.Field(i)
			if f.Anonymous && fv.Kind() == reflect.Struct {
				walk(prefix, fv)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if prefix != "" {
				name = prefix + "." + name
			}
			if fv.Kind() == reflect.Struct {
				walk(name, fv)
			} else {
				keys = append(keys, Key{name, fv})
			}
		}
	}
	walk("", reflect.ValueOf(v))
	return keys
}

// A Key is one leaf of a configuration: its dotted name and its value.
type Key struct {
	Name  string
	Value reflect.Value
}

// DidYouMean suggests the known name nearest to v (at most a third of its
// letters off), as ", did you mean \"x\"?", or "".
func DidYouMean(v string, known []string) string {
	best, bestD := "", math.MaxInt
	for _, k := range known {
		if d := editDistance(strings.ToLower(v), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(1, len(best)/3) {
		return ""
	}
	return fmt.Sprintf(", did you mean %q?", best)
}

// editDistance is the Levenshtein distance between a and b (in bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
