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

// SetStatsDeadline sets how long this instance's stats routes wait for the other ingress
// instances.
func (s *Server) SetStatsDeadline(d time.Duration) { s.stats.deadline.Store(int64(d)) }

// ListenSendBuffer is the kernel send buffer a listen stream's connection is given.
const ListenSendBuffer = listenSendBuffer

// ConfirmTimeout is how long an admin write waits for every ingress instance to confirm it,
// unless SetConfirmTimeout set another.
const ConfirmTimeout = confirmTimeout

// SetConfirmTimeout sets how long this instance's admin writes wait for every ingress instance
// to confirm them.
func (s *Server) SetConfirmTimeout(d time.Duration) { s.confirms.timeout.Store(int64(d)) }

// PresentIngresses are the other ingress instances the server waits for when it confirms a write.
func (s *Server) PresentIngresses() []string { return s.confirms.present() }
