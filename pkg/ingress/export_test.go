package ingress

import "time"

// RouteTable is the method and path template of every line of the route table, for the tests of
// the OpenAPI document. The handlers are not called, so a zero Server does.
func RouteTable() [][2]string {
	var table [][2]string
	for _, rt := range (&Server{}).api() {
		table = append(table, [2]string{rt.method, rt.path})
	}
	return table
}

// OpenAPIDocument is the document GET /openapi.json serves.
func OpenAPIDocument() []byte { return openAPIDocument }

// CleanPath is the path the ingress redirects an unclean path to.
var CleanPath = cleanPath

// MaxMCPBatch is the most messages a batch to POST /mcp may hold.
const MaxMCPBatch = maxMCPBatch

// SetStatsDeadline sets how long the stats routes wait for the other ingress instances, until
// the test ends. The tests that call it do not run in parallel (t.Parallel): the setting is the
// package's, read by every stack.
func SetStatsDeadline(t interface{ Cleanup(func()) }, d time.Duration) {
	old := statsDeadline
	statsDeadline = d
	t.Cleanup(func() { statsDeadline = old })
}

// ListenSendBuffer is the kernel send buffer a listen stream's connection is given.
const ListenSendBuffer = listenSendBuffer

// SetConfirmTimeout sets how long an admin write waits for every ingress instance to confirm
// it, until the test ends. The tests that call it do not run in parallel, as SetStatsDeadline's.
func SetConfirmTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := confirmTimeout
	confirmTimeout = d
	t.Cleanup(func() { confirmTimeout = old })
}

// PresentIngresses are the other ingress instances the server waits for when it confirms a write.
func (s *Server) PresentIngresses() []string { return s.confirms.present() }
