package ingress

import (
	"net/http"
	"strings"

	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
)

// authenticate checks the credentials a request carries (where names them for the client). Every
// credential given must be valid, else 401; when several are, the first wins, so callers list the
// Authorization header first.
func (s *Server) authenticate(where string, creds ...string) (keys.Key, *problem.Problem) {
	unauthorized := func(err error) *problem.Problem {
		return &problem.Problem{Status: http.StatusUnauthorized, Slug: "unauthorized", Detail: authDetail(err, where)}
	}
	var (
		key  keys.Key
		have bool
	)
	for _, cred := range creds {
		if cred = bearer(cred); cred == "" {
			continue
		}
		k, err := s.auth.Authenticate(cred)
		if err != nil {
			return keys.Key{}, unauthorized(err)
		}
		if !have {
			key, have = k, true
		}
	}
	if !have {
		return keys.Key{}, unauthorized(keys.ErrUnknownKey)
	}
	return key, nil
}

// bearer strips an optional "Bearer " scheme.
func bearer(cred string) string {
	cred = strings.TrimSpace(cred)
	if len(cred) > 7 && strings.EqualFold(cred[:7], "bearer ") {
		return strings.TrimSpace(cred[7:])
	}
	return cred
}

// headerOrQueryKey is where user endpoints look for a key: an EventSource or a webhook caller
// cannot always set headers.
const headerOrQueryKey = "the Authorization header or the apikey query parameter"
