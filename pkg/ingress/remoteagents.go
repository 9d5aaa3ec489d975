package ingress

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/jsonschema"
	"github.com/agentbus/agentbus/pkg/outbound"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/remote"
)

// Remote agents (docs/remote-agents.md): a system admin's, served to every tenant or to the
// tenants it names, under systemAgentsPath; a tenant's own under tenantAgentsPath.
const (
	systemAgentsPath = "/api/v1/admin/agents"
	tenantAgentsPath = tenantsPath + "/{tenantId}/agents"
)

// remoteOwner identifies the caller of a remote-agent endpoint and the owner it acts for: the
// path's tenant, or "" (a system admin's agents). On failure it has written the problem.
func (s *Server) remoteOwner(w http.ResponseWriter, r *http.Request) (caller, string, bool) {
	if strings.HasPrefix(r.Pattern, systemAgentsPath) {
		c, ok := s.identifyAdmin(w, r, systemAccess)
		if ok && r.Header.Get("X-Tenant-Id") != "" {
			problem.TenantMismatch.Write(w, systemAgentsPath+" manages agents of every tenant; a tenant's own are under "+tenantsPath+"/{tenantId}/agents")
			return caller{}, "", false
		}
		return c, "", ok
	}
	c, ok := s.identifyAdmin(w, r, adminAccess)
	return c, c.tenant, ok
}

func (s *Server) listRemoteAgents(w http.ResponseWriter, r *http.Request) {
	_, owner, ok := s.remoteOwner(w, r)
	if !ok {
		return
	}
	regs, err := s.remote.List(r.Context(), owner)
	if err != nil {
		s.remoteFailed(w, "listing remote agents", err)
		return
	}
	out := remote.List{Agents: make([]remote.Registration, 0, len(regs))}
	for _, reg := range regs {
		out.Agents = append(out.Agents, reg.Redacted())
	}
	writeJSON(w, http.StatusOK, out)
}

// registerRemoteAgent serves POST …/agents; putRemoteAgent PUT …/agents/{name}. The answer of a
// registration is the only one that shows the signing secret: a replacement keeps the secret, or
// takes the one its caller gave, and answers without it. Either answers once a workflow host
// serves the registration and every ingress routes calls by it, or with 202 when that does not
// come within the confirmations' time limit (confirmTimeout).
func (s *Server) registerRemoteAgent(w http.ResponseWriter, r *http.Request) {
	s.storeRemoteAgent(w, r, false)
}

func (s *Server) putRemoteAgent(w http.ResponseWriter, r *http.Request) {
	s.storeRemoteAgent(w, r, true)
}

func (s *Server) storeRemoteAgent(w http.ResponseWriter, r *http.Request, replace bool) {
	c, owner, ok := s.remoteOwner(w, r)
	if !ok {
		return
	}
	var body remote.Registration
	if p := decodeAdminBody(w, r, &body); p != nil {
		problem.Write(w, *p)
		return
	}
	if body.Owner != "" || !body.CreatedAt.IsZero() || !body.UpdatedAt.IsZero() {
		problem.InvalidField.Write(w, "owner, createdAt and updatedAt are not given, agentbus sets them")
		return
	}
	if replace {
		name := r.PathValue("name")
		if body.Name == "" {
			body.Name = name
		}
		if body.Name != name {
			problem.InvalidField.Write(w, "name differs from the path's")
			return
		}
	}
	if !c.isSystem() && owner != "" {
		// Compiling the schemas, which Put does to refuse bad ones, takes up to some hundred
		// milliseconds of this ingress's CPU: a registration with large schemas counts as more
		// than one write.
		s.limits.chargeTenant(owner, writesBucket, schemaWrites(body.Methods), time.Now())
	}
	// The hosts write the agent's entry in the registry once they serve the registration:
	// entries after this revision are of this registration.
	before, err := bus.NewestRevision(r.Context(), s.res.Registry)
	if err != nil {
		s.storeFailed(w, "registering a remote agent", err)
		return
	}
	reg, err := s.remote.Put(r.Context(), owner, body, replace)
	if err != nil {
		s.remoteFailed(w, "registering a remote agent", err)
		return
	}
	served := s.confirmServed(r.Context(), reg.Name, before)
	s.log.Info("remote agent registered", "agent", reg.Name, "owner", owner, "url", reg.URL, "replaced", replace, "by", c.key.ID, "served", served)
	status := http.StatusCreated
	if replace {
		status = http.StatusOK
	} else {
		prefix := systemAgentsPath
		if owner != "" {
			prefix = tenantsPath + "/" + owner + "/agents"
		}
		w.Header().Set("Location", prefix+"/"+reg.Name)
	}
	if replace {
		reg = reg.Redacted()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, confirmedStatus(status, served), reg)
}

func (s *Server) getRemoteAgent(w http.ResponseWriter, r *http.Request) {
	_, owner, ok := s.remoteOwner(w, r)
	if !ok {
		return
	}
	reg, err := s.remote.Get(r.Context(), owner, r.PathValue("name"))
	if err != nil {
		s.remoteFailed(w, "reading a remote agent", err)
		return
	}
	writeJSON(w, http.StatusOK, reg.Redacted())
}

func (s *Server) deleteRemoteAgent(w http.ResponseWriter, r *http.Request) {
	c, owner, ok := s.remoteOwner(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := s.remote.Delete(r.Context(), owner, name); err != nil {
		s.remoteFailed(w, "removing a remote agent", err)
		return
	}
	confirmed := s.confirmAgents(r.Context())
	s.log.Info("remote agent removed", "agent", name, "owner", owner, "by", c.key.ID, "confirmed", confirmed)
	w.WriteHeader(confirmedStatus(http.StatusNoContent, confirmed))
}

// remoteFailed answers a failure of the remote-agent store.
func (s *Server) remoteFailed(w http.ResponseWriter, what string, err error) {
	switch {
	case errors.Is(err, remote.ErrNotFound):
		problem.UnknownAgent.Write(w, "no remote agent of this name is registered here")
	case errors.Is(err, remote.ErrLimit):
		problem.RemoteAgentLimit.Write(w, "the tenant has as many remote agents as it may have (AGENTBUS_MAX_REMOTE_AGENTS_PER_TENANT); remove one first")
	case errors.Is(err, remote.ErrExists):
		problem.AgentExists.Write(w, "an agent of this name exists; choose another name, or replace your own with PUT")
	case errors.Is(err, outbound.ErrURLNotAllowed):
		problem.URLNotAllowed.Write(w, "the url does not match the operator's allow-list of outbound URLs (AGENTBUS_OUTBOUND_URLS)")
	case errors.Is(err, remote.ErrInvalid):
		problem.InvalidField.Write(w, err.Error())
	default:
		s.storeFailed(w, what, err)
	}
}

// compiledPerWrite is how much the methods' schemas of a registration may hold compiled for each
// configuration write it counts as beyond the first (jsonschema.Estimate), and maxSchemaWrites
// the most it counts as: what the 8 MiB a registration's schemas may hold count as (schemas past
// that are refused before most of their compilation).
const (
	compiledPerWrite = 256 << 10
	maxSchemaWrites  = 32
)

// schemaWrites is how many configuration writes, beyond the one every registration counts as,
// the compilation of methods' schemas counts as.
func schemaWrites(methods []remote.Method) int {
	compiled := 0
	for _, m := range methods {
		if len(m.Schema) > 0 {
			compiled += jsonschema.Estimate(m.Schema)
		}
	}
	return min(compiled/compiledPerWrite, maxSchemaWrites)
}
