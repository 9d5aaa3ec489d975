package ingress_test

import "net/url"

// isoInspectCases are the hosts views, an instance's queue and the retry of a queued request,
// aimed at B (docs/security.md#hosts-and-queues).
func isoInspectCases(A string) []isoCase {
	refused, hidden, mismatch := []int{403}, []int{404}, []int{400}
	const tenantsPath = "/api/v1/admin/tenants/"
	queueB := "/instances/" + url.PathEscape(isoWFB) + "/queue"
	return []isoCase{
		isoCase{"hosts/all hosts", get, "/api/v1/admin/hosts", bearerHeader(A), "", refused},
		isoCase{"hosts/B's hosts view", get, tenantsPath + "other/hosts", bearerHeader(A), "", refused},
		isoCase{"hosts/own hosts view, X-Tenant-Id other", get, tenantsPath + "default/hosts", append(bearerHeader(A), "X-Tenant-Id", "other"), "", mismatch},
		isoCase{"hosts/own hosts view shows nothing of B's", get, tenantsPath + "default/hosts", bearerHeader(A), "", []int{200}},
		isoCase{"queue/B's instance under B's path", get, tenantsPath + "other" + queueB, bearerHeader(A), "", refused},
		isoCase{"queue/B's instance under own path", get, tenantsPath + "default" + queueB, bearerHeader(A), "", hidden},
		isoCase{"queue/B's instance, X-Tenant-Id other", get, tenantsPath + "default" + queueB, append(bearerHeader(A), "X-Tenant-Id", "other"), "", mismatch},
		isoCase{"queue/retry B's request under B's path", post, tenantsPath + "other" + queueB + "/r/retry", bearerHeader(A), "", refused},
		isoCase{"queue/retry B's request under own path", post, tenantsPath + "default" + queueB + "/r/retry", bearerHeader(A), "", hidden},
	}
}
