package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/agentbus/agentbus/pkg/keys"
)

func (c *cli) tenantCreate(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("tenant create"), args, 1, "ID")
	if err != nil {
		return err
	}
	var t keys.TenantInfo
	if printed, err := c.fetch(ctx, http.MethodPost, "/api/v1/admin/tenants", nil, map[string]string{"id": pos[0]}, &t); err != nil || printed {
		return err
	}
	fmt.Fprintf(c.stdout, "tenant %s created\n", t.ID)
	return nil
}

func (c *cli) tenantList(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("tenant list"), args, 0, ""); err != nil {
		return err
	}
	var ans keys.TenantList
	if printed, err := c.fetch(ctx, http.MethodGet, "/api/v1/admin/tenants", nil, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ID\tCREATED")
	for _, t := range ans.Tenants {
		fmt.Fprintf(tw, "%s\t%s\n", t.ID, shortTime(t.CreatedAt.Time))
	}
	return tw.Flush()
}

func (c *cli) tenantDelete(ctx context.Context, args []string) error {
	pos, err := parse(c.flags("tenant delete"), args, 1, "ID")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, "/api/v1/admin/tenants/"+url.PathEscape(pos[0]), nil, nil, nil); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "tenant %s deleted; its keys are revoked and its data erased\n", pos[0])
	}
	return nil
}

// keysPath is where the keys of the current tenant are managed, or with system the tenant-less
// system-admin keys.
func (c *cli) keysPath(system bool) string {
	if system {
		return "/api/v1/admin/keys"
	}
	return c.tenantPath() + "/keys"
}

func (c *cli) keyCreate(ctx context.Context, args []string) error {
	fs := c.flags("key create")
	name := fs.String("name", "", "a name for the key, to recognise it in lists")
	role := fs.String("role", "user", "user, tenant-admin or system-admin (a tenant-less key)")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	var k keys.Created
	raw, err := c.call(ctx, http.MethodPost, c.keysPath(*role == "system-admin"), nil, map[string]string{"name": *name, "role": *role}, &k)
	if err != nil {
		return err
	}
	return c.showNewKey(raw, k, "created")
}

// showNewKey prints a new key's secret alone on stdout (so that it can be captured) and what it
// is on stderr.
func (c *cli) showNewKey(raw []byte, k keys.Created, what string) error {
	scope := "tenant " + k.Tenant
	if k.Tenant == "" {
		scope = "no tenant (system)"
	}
	note := fmt.Sprintf("key %s %s (name %q, role %s, %s)", k.ID, what, k.Name, k.Role, scope)
	if k.Replaces != "" {
		note += "; key " + k.Replaces + " is revoked"
	}
	fmt.Fprintf(c.stderr, "%s.\nwarning: the secret is shown only this once; store it now, it cannot be read again.\n", note)
	if c.json {
		c.printJSON(raw)
		return nil
	}
	fmt.Fprintln(c.stdout, k.Secret)
	return nil
}

func (c *cli) keyList(ctx context.Context, args []string) error {
	fs := c.flags("key list")
	system := fs.Bool("system", false, "list the tenant-less system-admin keys")
	if _, err := parse(fs, args, 0, ""); err != nil {
		return err
	}
	var ans keys.KeyList
	if printed, err := c.fetch(ctx, http.MethodGet, c.keysPath(*system), nil, nil, &ans); err != nil || printed {
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tREVOKED")
	for _, k := range ans.Keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = shortTime(k.RevokedAt.Time)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Role, shortTime(k.CreatedAt.Time), revoked)
	}
	return tw.Flush()
}

func (c *cli) keyRevoke(ctx context.Context, args []string) error {
	fs := c.flags("key revoke")
	system := fs.Bool("system", false, "the key is a tenant-less system-admin key")
	pos, err := parse(fs, args, 1, "KEYID")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, c.keysPath(*system)+"/"+url.PathEscape(pos[0]), nil, nil, nil); err != nil {
		return err
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "key %s revoked\n", pos[0])
	}
	return nil
}

func (c *cli) keyRotate(ctx context.Context, args []string) error {
	fs := c.flags("key rotate")
	system := fs.Bool("system", false, "the key is a tenant-less system-admin key")
	pos, err := parse(fs, args, 1, "KEYID")
	if err != nil {
		return err
	}
	var k keys.Created
	raw, err := c.call(ctx, http.MethodPost, c.keysPath(*system)+"/"+url.PathEscape(pos[0])+"/rotate", nil, nil, &k)
	if err != nil {
		return err
	}
	return c.showNewKey(raw, k, "created")
}
