package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	storage "github.com/agentbus/agentbus/pkg/usage"
)

// tenantUsage prints what a tenant stores, by kind, and its instances, against its quotas: the
// tenant named, or the current one (-tenant, AGENTBUS_TENANT).
func (c *cli) tenantUsage(ctx context.Context, args []string) error {
	pos, err := parseBetween(c.flags("tenant usage"), args, 0, 1, "[ID]")
	if err != nil {
		return err
	}
	tenant := c.tenant
	if len(pos) == 1 {
		tenant = pos[0]
	}
	var r storage.Report
	if printed, err := c.fetch(ctx, http.MethodGet, "/api/v1/admin/tenants/"+url.PathEscape(tenant)+"/usage", nil, nil, &r); err != nil || printed {
		return err
	}
	tw := c.fields()
	tw.row("tenant", r.Tenant)
	tw.row("history", bytesOf(r.Bytes.History))
	tw.row("files", bytesOf(r.Bytes.Files))
	tw.row("payloads", bytesOf(r.Bytes.Payloads))
	tw.row("kept", bytesOf(r.Bytes.Kept))
	tw.row("state", bytesOf(r.Bytes.State))
	tw.row("timers", bytesOf(r.Bytes.Timers))
	tw.row("total", ofQuota(bytesOf(r.Bytes.Total), r.Bytes.Total, r.Quota.Bytes, bytesOf))
	tw.row("instances", ofQuota(strconv.FormatInt(r.Instances, 10), r.Instances, r.Quota.Instances,
		func(n int64) string { return strconv.FormatInt(n, 10) }))
	return tw.Flush()
}

// ofQuota shows a figure against its quota: "… of … (12.5 %)", or "… (no quota)".
func ofQuota(shown string, n, quota int64, show func(int64) string) string {
	if quota <= 0 {
		return shown + " (no quota)"
	}
	return fmt.Sprintf("%s of %s (%.1f %%)", shown, show(quota), 100*float64(n)/float64(quota))
}

// bytesOf shows a number of bytes exactly, and in binary units from a KiB on: 1536 (1.5 KiB).
func bytesOf(n int64) string {
	exact := strconv.FormatInt(n, 10)
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v, unit := float64(n), ""
	for _, u := range units {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	if unit == "" {
		return exact + " bytes"
	}
	return fmt.Sprintf("%s bytes (%.1f %s)", exact, v, unit)
}
