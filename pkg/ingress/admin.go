package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/ident"
	"github.com/agentbus/agentbus/pkg/keys"
	"github.com/agentbus/agentbus/pkg/problem"
	"github.com/agentbus/agentbus/pkg/subject"
	"github.com/agentbus/agentbus/pkg/tenantdata"
)

// Admin API limits.
const (
	// maxAdminBody bounds the JSON bodies of the admin endpoints; theirs are a few fields.
	maxAdminBody = 64 << 10
	// maxKeyName bounds a key's name, in bytes.
	maxKeyName = 128
)

// Paths of the admin API.
const (
	tenantsPath    = "/api/v1/admin/tenants"
	systemKeysPath = "/api/v1/admin/keys"
)

// identifyAdmin is identify for the admin API, after the query's check (readQuery); on failure
// it has written the problem and returns false.
func (s *Server) identifyAdmin(w http.ResponseWriter, r *http.Request, a access) (caller, bool) {
	query, p := readQuery(r)
	var c caller
	if p == nil {
		c, p = s.identify(r, query, a)
	}
	if p != nil {
		problem.Write(w, *p)
		return caller{}, false
	}
	return c, true
}

// keyScope identifies the caller of a key endpoint and whose keys it manages: the path tenant's
// (for its tenant admins and system admins), or, on /api/v1/admin/keys, the tenant-less
// system keys (for system admins). The other endpoints of a tenant's admins (its dead letters)
// are scoped by it too. On failure it has written the problem and returns false.
func (s *Server) keyScope(w http.ResponseWriter, r *http.Request) (caller, bool) {
	if !strings.HasPrefix(r.Pattern, systemKeysPath) {
		return s.identifyAdmin(w, r, adminAccess)
	}
	c, ok := s.identifyAdmin(w, r, systemAccess)
	if ok && r.Header.Get("X-Tenant-Id") != "" {
		problem.TenantMismatch.Write(w, "/api/v1/admin/keys manages system keys; a tenant's keys are under /api/v1/admin/tenants/{tenantId}/keys")
		return caller{}, false
	}
	return c, ok
}

// mayManage reports whether caller may create, revoke or rotate keys of this role: only system
// admins touch system-admin keys, so a tenant admin cannot raise itself.
func mayManage(c caller, role keys.Role) bool {
	return c.isSystem() || role != keys.RoleSystemAdmin
}

// storeFailed answers a failure of a store on the bus (tenants, keys, instances, remote agents):
// 503 bus-unavailable with Retry-After; the cause is only logged. A write that kept meeting other
// writers' changes of its record for bus.ConflictPatience (bus.ErrConflictsPersisted) failed no
// less, and is answered the same, with a detail that says so.
func (s *Server) storeFailed(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, bus.ErrConflictsPersisted) {
		s.log.Warn(what, "err", err)
		problem.BusUnavailable.Write(w, "other writers kept changing the same record at the same time; try again")
		return
	}
	s.log.Error(what, "err", err)
	problem.BusUnavailable.Write(w, "try again")
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.identifyAdmin(w, r, systemAccess); !ok {
		return
	}
	ts, err := s.keys.ListTenants(r.Context())
	if err != nil {
		s.storeFailed(w, "listing tenants", err)
		return
	}
	out := keys.TenantList{Tenants: make([]keys.TenantInfo, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, keys.InfoOf(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.identifyAdmin(w, r, systemAccess); !ok {
		return
	}
	var body struct {
		ID string `json:"id"`
	}
	if p := decodeAdminBody(w, r, &body); p != nil {
		problem.Write(w, *p)
		return
	}
	t, err := s.keys.CreateTenant(r.Context(), body.ID)
	var held *keys.HeldIDError
	switch {
	case errors.Is(err, ident.ErrInvalidTenant):
		problem.InvalidTenant.Write(w, "id: "+ident.ErrInvalidTenant.Error())
		return
	case errors.As(err, &held):
		w.Header().Set("Retry-After", strconv.Itoa(int(time.Until(held.FreeAt).Seconds())+1))
		problem.TenantExists.Write(w, held.Error())
		return
	case errors.Is(err, keys.ErrTenantExists):
		problem.TenantExists.Write(w, "a tenant with this id exists")
		return
	case err != nil:
		s.storeFailed(w, "creating tenant", err)
		return
	}
	// A tenant of this id deleted before may have left what its requests running at the
	// deletion wrote after it: the new tenant starts with nothing. Without the erasure it is not
	// made, so that creating it again tries again.
	if err := s.eraseTenant(r.Context(), t.ID, false); err != nil {
		if derr := s.keys.AbandonTenant(context.WithoutCancel(r.Context()), t.ID); derr != nil {
			s.log.Error("removing a tenant made without its erasure", "tenant", t.ID, "err", derr)
		}
		s.storeFailed(w, "creating tenant", err)
		return
	}
	w.Header().Set("Location", tenantsPath+"/"+t.ID)
	writeJSON(w, http.StatusCreated, keys.InfoOf(t))
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, adminAccess)
	if !ok {
		return
	}
	t, err := s.keys.GetTenant(r.Context(), c.tenant)
	if errors.Is(err, keys.ErrUnknownTenant) { // deleted since identify looked
		problem.UnknownTenant.Write(w, "no such tenant")
		return
	}
	if err != nil {
		s.storeFailed(w, "reading tenant", err)
		return
	}
	writeJSON(w, http.StatusOK, keys.InfoOf(t))
}

// deleteTenant removes a tenant, its dead letters, subscriptions, remote agents and timers,
// revokes its keys and erases its data (package tenantdata). The tenant's existence is
// left to DeleteTenant to judge: a deletion that failed part way leaves a tenant that readers no
// longer see, and calling again finishes it.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) {
	c, ok := s.identifyAdmin(w, r, systemAccess)
	if !ok {
		return
	}
	tenant, header := r.PathValue("tenantId"), r.Header.Get("X-Tenant-Id")
	if header != "" && header != tenant {
		problem.TenantMismatch.Write(w, "the path tenant and X-Tenant-Id differ")
		return
	}
	if !ident.ValidTenant(tenant) {
		problem.InvalidTenant.Write(w, ident.ErrInvalidTenant.Error())
		return
	}
	// Dead letters, subscriptions, remote agents and timers go first: if that fails the tenant is still
	// there to delete again, whereas once it is gone nobody could reach them. For an unknown
	// tenant this removes only what a deleted tenant of that id left behind.
	if err := s.dead.PurgeTenant(r.Context(), tenant); err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	if err := s.subs.DeleteTenant(r.Context(), tenant); err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	if err := s.remote.DeleteTenant(r.Context(), tenant); err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	if err := s.schedules().DeleteTenant(r.Context(), tenant); err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	if err := s.tenantLimits.store.Delete(r.Context(), tenant); err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	err := s.keys.RetireTenant(r.Context(), tenant)
	if errors.Is(err, keys.ErrUnknownTenant) {
		// What a deleted tenant of that id left behind: what its requests running at the
		// deletion wrote after it.
		if err := s.eraseTenant(r.Context(), tenant, true); err != nil {
			s.storeFailed(w, "erasing a deleted tenant's data", err)
			return
		}
		problem.UnknownTenant.Write(w, "no such tenant")
		return
	}
	if err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	// The record goes once every ingress refuses the tenant's keys: until then a call again
	// finds it, retired, and confirms again.
	if !s.confirmKeys(r.Context()) {
		s.log.Warn("tenant deleted, its keys' revocation not yet confirmed", "tenant", tenant, "by", c.key.ID)
		problem.BusUnavailable.Write(w, "the tenant is deleted and its keys revoked, but not every ingress instance confirmed within "+
			s.confirms.limit().String()+" that it refuses them; delete the tenant again to confirm it")
		return
	}
	// No call of the tenant's is taken any more: its data goes, and then its record, so that
	// a deletion that fails here is made again by calling again.
	if err := s.eraseTenant(r.Context(), tenant, true); err != nil {
		s.storeFailed(w, "erasing the tenant's data", err)
		return
	}
	if err := s.keys.RemoveTenant(r.Context(), tenant); err != nil {
		s.storeFailed(w, "deleting tenant", err)
		return
	}
	s.log.Info("tenant deleted", "tenant", tenant, "by", c.key.ID)
	w.WriteHeader(http.StatusNoContent)
}

// eraseTenant erases a tenant's data (tenantdata.Erase; without objects,
// tenantdata.EraseRecords), telling the workflow hosts before and after (subject.TenantNotice):
// they drop, unrun, the tenant's requests stored before the notice that they hold or are
// delivered later, and their copies in memory of its instances. Each notice is flushed, so that
// the server has it before the erasure starts and before the caller can make the next call. A
// notice lost costs time and work, not data that stays: a copy's next write meets the erased
// record and thread, conflicts and reads them anew; a request run after the erasure writes
// records that the next erasure of the id (its deletion again, or a tenant made with it) removes.
func (s *Server) eraseTenant(ctx context.Context, tenant string, objects bool) error {
	notice := func() {
		if err := s.cfg.Conn.Publish(subject.TenantNotice(tenant), nil); err == nil {
			_ = s.cfg.Conn.FlushWithContext(ctx)
		}
	}
	erase := tenantdata.EraseRecords
	if objects {
		erase = tenantdata.Erase
	}
	notice()
	if err := erase(ctx, s.res, tenant); err != nil {
		return err
	}
	notice()
	return nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	c, ok := s.keyScope(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	ks, err := s.keys.Keys(r.Context(), tenant)
	if err != nil {
		s.storeFailed(w, "listing keys", err)
		return
	}
	out := make([]keys.Key, 0, len(ks))
	for _, k := range ks {
		if k.Tenant == tenant { // Keys("") is every key; the system scope is the tenant-less ones
			out = append(out, k)
		}
	}
	writeJSON(w, http.StatusOK, keys.KeyList{Keys: out})
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	c, ok := s.keyScope(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	var body struct {
		Name string    `json:"name"`
		Role keys.Role `json:"role"`
	}
	if p := decodeAdminBody(w, r, &body); p != nil {
		problem.Write(w, *p)
		return
	}
	invalid := func(detail string) {
		problem.InvalidField.Write(w, detail)
	}
	nameErr := subject.CheckText("name", body.Name, maxKeyName)
	switch {
	case !body.Role.Valid():
		invalid("role must be user, tenant-admin or system-admin")
		return
	case !mayManage(c, body.Role):
		problem.Forbidden.Write(w, "only system admins create system-admin keys")
		return
	case tenant != "" && body.Role == keys.RoleSystemAdmin:
		invalid("system-admin keys belong to no tenant: create them with POST " + systemKeysPath)
		return
	case tenant == "" && body.Role != keys.RoleSystemAdmin:
		invalid("keys of a tenant are created with POST " + tenantsPath + "/{tenantId}/keys")
		return
	case nameErr != nil:
		invalid(nameErr.Error())
		return
	}
	secret, k, err := s.keys.Create(r.Context(), keys.NewKey{Tenant: tenant, Role: body.Role, Name: body.Name, CreatedBy: c.key.ID})
	if errors.Is(err, keys.ErrLimit) {
		problem.KeyLimit.Write(w, fmt.Sprintf("the tenant has %d keys in force, as many as it may have (AGENTBUS_MAX_KEYS_PER_TENANT); revoke one first, or rotate it", s.cfg.MaxKeysPerTenant))
		return
	}
	if err != nil {
		s.storeFailed(w, "creating key", err)
		return
	}
	if !s.tenantStillThere(w, r.Context(), k) {
		return
	}
	confirmed := s.confirmKeys(r.Context())
	s.log.Info("key created", "tenant", tenant, "key", k.ID, "role", k.Role, "by", c.key.ID, "confirmed", confirmed)
	writeNewKey(w, r, keys.Created{Secret: secret, Key: k}, confirmed)
}

// tenantStillThere closes the race between creating a key and deleting its tenant: a tenant
// being deleted is unknown from the moment its deletion starts, before its keys are revoked and
// removed, so a key created while it was still known is either revoked and removed by the
// deletion or removed here (its secret is not shown).
// On failure it has written the problem and returns false.
func (s *Server) tenantStillThere(w http.ResponseWriter, ctx context.Context, k keys.Key) bool {
	if k.Tenant == "" {
		return true
	}
	_, err := s.keys.GetTenant(ctx, k.Tenant)
	if err == nil {
		return true
	}
	if rerr := s.keys.Remove(context.WithoutCancel(ctx), k.ID); rerr != nil && !errors.Is(rerr, keys.ErrUnknownKey) {
		s.log.Error("removing a key of a deleted tenant", "key", k.ID, "err", rerr)
	}
	if errors.Is(err, keys.ErrUnknownTenant) {
		problem.UnknownTenant.Write(w, "no such tenant")
	} else {
		s.storeFailed(w, "reading tenant", err)
	}
	return false
}

// writeNewKey answers with a new key: 201 once every ingress instance accepts it (confirmed),
// else 202. The secret must not be cached anywhere on the way.
func writeNewKey(w http.ResponseWriter, r *http.Request, a keys.Created, confirmed bool) {
	prefix := systemKeysPath
	if t := r.PathValue("tenantId"); t != "" {
		prefix = tenantsPath + "/" + t + "/keys"
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", prefix+"/"+a.ID)
	writeJSON(w, confirmedStatus(http.StatusCreated, confirmed), a)
}

// confirmedStatus is the status of a write's answer: done once every ingress instance sees the
// write (confirmed), else 202 Accepted: stored, and seen everywhere once the instances that did
// not confirm catch up.
func confirmedStatus(done int, confirmed bool) int {
	if confirmed {
		return done
	}
	return http.StatusAccepted
}

// scopedKey reads the key the path names, which must be of the scope's tenant: a key of
// another tenant is as unknown as a key that does not exist. On failure it has written the
// problem and returns false.
func (s *Server) scopedKey(w http.ResponseWriter, r *http.Request, tenant string) (keys.Key, bool) {
	k, err := s.keys.Get(r.Context(), r.PathValue("keyId"))
	if err == nil && k.Tenant != tenant {
		err = keys.ErrUnknownKey
	}
	if errors.Is(err, keys.ErrUnknownKey) {
		problem.UnknownKey.Write(w, "no such key")
		return keys.Key{}, false
	}
	if err != nil {
		s.storeFailed(w, "reading key", err)
		return keys.Key{}, false
	}
	return k, true
}

func (s *Server) getKey(w http.ResponseWriter, r *http.Request) {
	c, ok := s.keyScope(w, r)
	if !ok {
		return
	}
	tenant := c.tenant
	k, ok := s.scopedKey(w, r, tenant)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, k)
}

// manageableKey finds the key a revoke or rotate call names, within the caller's scope, and
// checks the caller may change it (verb names the change in the refusal).
func (s *Server) manageableKey(w http.ResponseWriter, r *http.Request, verb string) (c caller, k keys.Key, ok bool) {
	if c, ok = s.keyScope(w, r); !ok {
		return
	}
	if k, ok = s.scopedKey(w, r, c.tenant); !ok {
		return
	}
	if !mayManage(c, k.Role) {
		problem.Forbidden.Write(w, "only system admins "+verb+" system-admin keys")
		return c, k, false
	}
	return c, k, true
}

// revokeKey revokes a key, and answers once every ingress refuses it. Revoking a revoked key
// again is not an error, keeps the first revocation time, and confirms the revocation again.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	c, k, ok := s.manageableKey(w, r, "revoke")
	if !ok {
		return
	}
	tenant := c.tenant
	if _, err := s.keys.RevokeID(r.Context(), k.ID); err != nil {
		s.storeFailed(w, "revoking key", err)
		return
	}
	if !s.confirmKeys(r.Context()) {
		s.log.Warn("key revoked, not yet confirmed", "tenant", tenant, "key", k.ID, "by", c.key.ID)
		problem.BusUnavailable.Write(w, "the key is revoked, but not every ingress instance confirmed within "+
			s.confirms.limit().String()+" that it refuses it; revoke it again to confirm it")
		return
	}
	s.log.Info("key revoked", "tenant", tenant, "key", k.ID, "by", c.key.ID)
	w.WriteHeader(http.StatusNoContent)
}

// rotateKey replaces a key with a new one of the same name and role, and revokes the old one.
func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request) {
	c, k, ok := s.manageableKey(w, r, "rotate")
	if !ok {
		return
	}
	tenant := c.tenant
	secret, nk, old, err := s.keys.Rotate(r.Context(), k.ID, c.key.ID)
	switch {
	case errors.Is(err, keys.ErrRevoked):
		problem.KeyRevoked.Write(w, "the key is revoked; create a new one instead")
		return
	case errors.Is(err, keys.ErrUnknownKey):
		problem.UnknownKey.Write(w, "no such key")
		return
	case err != nil:
		s.storeFailed(w, "rotating key", err)
		return
	}
	if !s.tenantStillThere(w, r.Context(), nk) {
		return
	}
	confirmed := s.confirmKeys(r.Context())
	s.log.Info("key rotated", "tenant", tenant, "key", nk.ID, "replaces", old.ID, "by", c.key.ID, "confirmed", confirmed)
	writeNewKey(w, r, keys.Created{Secret: secret, Key: nk, Replaces: old.ID}, confirmed)
}

// decodeAdminBody reads a body that must be exactly one JSON object with only the fields of v.
// Unknown fields are refused, so that a misspelt field is not silently dropped.
func decodeAdminBody(w http.ResponseWriter, r *http.Request, v any) *problem.Problem {
	invalid := func(detail string) *problem.Problem {
		return problem.InvalidJSON.New("the body must be one JSON object: " + detail)
	}
	tooLargeProblem := problem.BodyTooLarge.New(fmt.Sprintf("the body is larger than %d bytes", maxAdminBody))
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return nil
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return tooLargeProblem
		}
		return invalid("more than one value")
	}
	var (
		tooLarge *http.MaxBytesError
		typeErr  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return tooLargeProblem
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return invalid("not an object")
		}
		return invalid("field " + subject.Quote(typeErr.Field) + " has the wrong type")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no type for this error; the field name is the client's, so it is
		// shown bounded.
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		if uerr != nil {
			return invalid("unknown field")
		}
		return invalid("unknown field " + subject.Quote(name))
	default:
		return invalid(jsonProblem(err))
	}
}
