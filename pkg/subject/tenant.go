package subject

// What a tenant stored, by store: the filters (and the object name prefix) that find every record
// of one tenant, for erasing them when the tenant is deleted (package tenantdata). Each takes a
// tenant id that passed CheckTenant: one token, without wildcards.

// TenantInboxRequests is the filter of a tenant's requests in any agent's inbox stream, as the
// stream stores them (agentbus.in.{agent}.{partition}.{tenant}.{wf}.{participant},
// InboxTransform). Inbox markers have fewer tokens and never match.
func TenantInboxRequests(tenant string) string { return inboxPrefix + ".*.*." + tenant + ".*.*" }

// InboxesSubjects matches the subjects of every agent's inbox stream, to list those streams.
func InboxesSubjects() string { return inboxPrefix + ".>" }

// TenantSteps is the filter of a tenant's records in the steps journal (Step).
func TenantSteps(tenant string) string { return stepsPrefix + "." + tenant + ".>" }

// TenantWaits is the filter of a tenant's waits and the requests held behind them (Wait).
func TenantWaits(tenant string) string { return waitsPrefix + "." + tenant + ".>" }

// TenantUsageDays is the filter of a tenant's day counters (UsageDay).
func TenantUsageDays(tenant string) string { return usageDayPrefix + "." + tenant + ".>" }

// TenantUsageTotals is the filter of a tenant's totals counters (UsageTotal).
func TenantUsageTotals(tenant string) string { return usageTotalPrefix + "." + tenant + ".*" }

// TenantKeys is the filter of a tenant's keys in a key-value bucket whose keys begin with the
// tenant's id and a dot (InstanceKey, TopicsKey, ResultKey), as the bucket's stream stores them.
func TenantKeys(bucket, tenant string) string { return KVKeyPrefix(bucket) + tenant + ".>" }

// FileObject is the name of an uploaded file in the files object store: {tenant}/{id}.
func FileObject(tenant, id string) string { return tenant + "/" + id }

// TenantObjects is the prefix of the names of a tenant's objects, in the files object store
// (FileObject) and the claims object store (ClaimName).
func TenantObjects(tenant string) string { return tenant + "/" }
