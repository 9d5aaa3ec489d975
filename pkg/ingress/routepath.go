package ingress

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
)

// pathTemplate matches a route's path template, literal segments and {name} variables, against
// a request's escaped path exactly as gorilla/mux's own path matcher for the template would:
// each variable is one non-empty segment (mux's default [^/]+) and the whole path must match.
// It compares segments instead of running the template's regular expression twice on every
// request (once to match, once more to extract the variables, each time on a freshly escaped
// copy of the path): those took 2 % of a webhook call's CPU.
//
// Variables with a pattern of their own ({id:[0-9]+}) are not supported; compileTemplate
// panics on them, as on any template it cannot take, since the routes are fixed in the code.
type pathTemplate struct {
	segments []segment
}

// segment is one segment of a template: a literal, or a variable when name is set.
type segment struct {
	literal, name string
}

// maxPathVars bounds the variables of one template, so that match collects them without
// allocating.
const maxPathVars = 4

func compileTemplate(template string) pathTemplate {
	rest, ok := strings.CutPrefix(template, "/")
	if !ok {
		panic(fmt.Sprintf("route %q does not start with /", template))
	}
	var t pathTemplate
	vars := 0
	for seg := range strings.SplitSeq(rest, "/") {
		if inner, ok := strings.CutPrefix(seg, "{"); ok {
			name, ok := strings.CutSuffix(inner, "}")
			if !ok || name == "" || strings.ContainsAny(name, "{}:") {
				panic(fmt.Sprintf("route %q: %q is not a {name} variable", template, seg))
			}
			if vars++; vars > maxPathVars {
				panic(fmt.Sprintf("route %q has more than %d variables", template, maxPathVars))
			}
			t.segments = append(t.segments, segment{name: name})
			continue
		}
		if strings.ContainsAny(seg, "{}%") {
			panic(fmt.Sprintf("route %q: segment %q is neither a literal nor a {name} variable", template, seg))
		}
		t.segments = append(t.segments, segment{literal: seg})
	}
	return t
}

// match reports whether the escaped path p matches the template and, when it does and set is
// not nil, calls set with each variable's name and its (still escaped) value.
func (t *pathTemplate) match(p string, set func(name, value string)) bool {
	rest, ok := strings.CutPrefix(p, "/")
	if !ok {
		return false
	}
	var values [maxPathVars]string
	n := 0
	for i, want := range t.segments {
		seg, tail, more := strings.Cut(rest, "/")
		if more != (i < len(t.segments)-1) {
			return false // more segments than the template, or fewer
		}
		switch {
		case want.name == "" && seg != want.literal:
			return false
		case want.name != "" && seg == "":
			return false
		case want.name != "":
			values[n] = seg
			n++
		}
		rest = tail
	}
	if set != nil {
		n = 0
		for _, s := range t.segments {
			if s.name != "" {
				set(s.name, values[n])
				n++
			}
		}
	}
	return true
}

// matcher is t as the path matcher of a route of the given method. It fills the match's
// variables (mux.Vars) only when the method is the route's too: after a method mismatch mux
// goes on to the next route with the same RouteMatch, which must not keep this route's
// variables.
func (t *pathTemplate) matcher(method string) mux.MatcherFunc {
	return func(r *http.Request, m *mux.RouteMatch) bool {
		if r.Method != method {
			return t.match(r.URL.EscapedPath(), nil)
		}
		return t.match(r.URL.EscapedPath(), func(name, value string) {
			if m.Vars == nil {
				m.Vars = make(map[string]string, maxPathVars)
			}
			m.Vars[name] = value
		})
	}
}
