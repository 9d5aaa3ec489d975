package subject

import (
	"fmt"
	"strings"
)

// Usage counters (package usage): JetStream counter streams, one subject per counter, each
// holding its last value only.
const (
	// UsageStream counts the bytes each tenant stored, by kind and UTC day (UsageDay): a day's
	// counter ages out of the stream after the longest retention of what it counts, as the data
	// it counted does.
	UsageStream = "AGENTBUS_USAGE"
	// UsageTotalsStream counts what each tenant has that does not age out (UsageTotal): its
	// workflow instances.
	UsageTotalsStream = "AGENTBUS_USAGE_TOTALS"
)

const (
	usageDayPrefix   = "agentbus.usage.day"
	usageTotalPrefix = "agentbus.usage.total"
)

// UsageDayLayout is how a UsageDay subject writes its day (UTC).
const UsageDayLayout = "20060102"

// UsageDay is the counter subject of the bytes of one kind ("history", "files", "payloads",
// "kept") a tenant stored on one UTC day (UsageDayLayout). Kinds are names package usage
// chooses, token safe.
func UsageDay(tenant, kind, day string) string {
	return usageDayPrefix + "." + tenant + "." + kind + "." + day
}

// UsageDaySubjects is the subject filter of UsageStream.
func UsageDaySubjects() string { return usageDayPrefix + ".>" }

// ParseUsageDay reads a UsageDay subject back into its tenant, kind and day.
func ParseUsageDay(subj string) (tenant, kind, day string, err error) {
	rest, ok := strings.CutPrefix(subj, usageDayPrefix+".")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return "", "", "", fmt.Errorf("subject %q is not a usage day counter", subj)
	}
	return parts[0], parts[1], parts[2], nil
}

// UsageTotal is the counter subject of something a tenant has that does not age out ("instances").
func UsageTotal(tenant, what string) string { return usageTotalPrefix + "." + tenant + "." + what }

// UsageTotalSubjects is the subject filter of UsageTotalsStream.
func UsageTotalSubjects() string { return usageTotalPrefix + ".>" }

// ParseUsageTotal reads a UsageTotal subject back into its tenant and what it counts.
func ParseUsageTotal(subj string) (tenant, what string, err error) {
	rest, ok := strings.CutPrefix(subj, usageTotalPrefix+".")
	tenant, what, found := strings.Cut(rest, ".")
	if !ok || !found || strings.Contains(what, ".") {
		return "", "", fmt.Errorf("subject %q is not a usage total counter", subj)
	}
	return tenant, what, nil
}

// HeaderIncr is the header that makes a publish to a counter stream add its value (a whole
// number, negative to subtract) to the subject's counter.
const HeaderIncr = "Nats-Incr"

// ClaimTenant is the tenant of a claim-checked payload's object name (ClaimName); "" for a name
// ClaimName did not make.
func ClaimTenant(name string) string {
	tenant, _, ok := strings.Cut(name, "/")
	if !ok {
		return ""
	}
	return tenant
}
