package ingress

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/registry"
)

// agentsAnswer is the answer of GET /api/user/agents.
type agentsAnswer struct {
	// Tenant is the key's tenant, which the caller needs to build workflow ids and to read
	// history; empty for a system key, which serves every tenant.
	Tenant string        `json:"tenant,omitempty"`
	Agents []agentAnswer `json:"agents"`
}

// agentAnswer is an agent's registration as its hosts wrote it, and whether one of them is alive.
// The registration is embedded whole, so whatever a host registers reaches clients unchanged.
type agentAnswer struct {
	registry.Agent
	Live bool `json:"live"`
}

// listAgents serves GET /api/user/agents: every registered agent, ordered by name, with what it
// can be called with (workflow types, webhook and Data methods, whether it takes Chat and File
// messages) and whether a live workflow host runs it now. Agents are registered by their hosts for
// the whole bus; a tenant's key lists those the tenant may call (agent.Tenants restricts an agent),
// a system key all of them. Any valid key may ask, in the Authorization header or the apikey query
// parameter.
func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	query, p := readQuery(r)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	c, p := s.identify(r, query, agentsAccess)
	if p != nil {
		problem.Write(w, *p)
		return
	}
	ans := agentsAnswer{Tenant: c.tenant}
	registered := s.dir.VisibleAgents(ans.Tenant)
	ans.Agents = make([]agentAnswer, 0, len(registered))
	for _, a := range registered {
		if ans.Tenant != "" {
			a.Tenants = nil // which other tenants may call an agent is not this tenant's business
		}
		ans.Agents = append(ans.Agents, agentAnswer{Agent: a, Live: s.dir.Live(a.Name)})
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, ans)
}
