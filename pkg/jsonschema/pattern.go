package jsonschema

import (
	"fmt"
	"regexp"
	"regexp/syntax"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxPatternSize bounds the regular expressions of one schema: the sizes of its patterns
// (pattern, and patternProperties' names) add up to at most this many steps of a compiled
// regular expression, a step being about what a character or class matches once, and each
// pattern counting patternCost steps more for what Go keeps of any regular expression. A
// repetition multiplies what it repeats: "^[a-z]{2,8}$" is about 20 steps, "^.{1,1000}$" about
// 2,000. Go compiles a pattern into an instruction per step, some 45 bytes each, so that a 64 KiB
// schema of such patterns compiled to more than 150 MB, in every process that checks its calls;
// at the bound a schema's patterns take about 5 MB. A value checked against "format": "regex"
// is held to the same bound.
const MaxPatternSize = 100_000

// patternCost is what a compiled regular expression holds beside its instructions (its one-pass
// form, which an anchored pattern also gets), in steps: 3 to 6 KB.
const patternCost = 100

// patternSize is about how many instructions Go compiles pattern into, worked out from its
// syntax tree without expanding its repetitions; 0 for a pattern Go cannot parse (compiling it
// reports why).
func patternSize(pattern string) int {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	return treeSize(re)
}

// treeSize follows regexp/syntax's own account of a compiled program's size: a repetition
// {n,m} holds m copies of what it repeats (n+1 when unbounded). It saturates past
// MaxPatternSize, so that nested repetitions cannot overflow it.
func treeSize(re *syntax.Regexp) int {
	var n int
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = 2 + treeSize(re.Sub[0])
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		n = times * (1 + treeSize(re.Sub[0]))
	case syntax.OpConcat, syntax.OpAlternate:
		n = len(re.Sub)
		for _, sub := range re.Sub {
			n += treeSize(sub)
		}
	default:
		n = 1
	}
	return min(n, MaxPatternSize+1)
}

// schemaPatternSize adds up the sizes of the patterns in doc, a decoded schema: every string
// under a "pattern" key and every name under a "patternProperties" key, wherever they are (a
// property named "pattern" whose value is a schema is an object, not counted). It stops once past
// MaxPatternSize.
func schemaPatternSize(doc any) int {
	total := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, sub := range v {
				if total > MaxPatternSize {
					return
				}
				switch s := sub.(type) {
				case string:
					if k == "pattern" {
						total += patternCost + patternSize(s)
					}
				case map[string]any:
					if k == "patternProperties" {
						for name := range s {
							total += patternCost + patternSize(name)
						}
					}
				}
				walk(sub)
			}
		case []any:
			for _, sub := range v {
				walk(sub)
			}
		}
	}
	walk(doc)
	return total
}

// errPatternsTooLarge is why a schema whose patterns are too large does not compile.
var errPatternsTooLarge = fmt.Errorf("the schema's patterns are too large: more than %d steps in all, where a repetition such as {1,1000} multiplies what it repeats", MaxPatternSize)

// compilePattern is the regular-expression engine of every schema compiled here: Go's regexp,
// refusing a pattern larger than MaxPatternSize before compiling it (a value checked against
// "format": "regex" comes from the caller).
func compilePattern(pattern string) (sjs.Regexp, error) {
	if n := patternSize(pattern); n > MaxPatternSize {
		return nil, fmt.Errorf("the pattern is too large: more than %d steps, where a repetition such as {1,1000} multiplies what it repeats", MaxPatternSize)
	}
	return regexp.Compile(pattern)
}
