package ingress

import (
	"net/http"

	"github.com/agentbus/agentbus/pkg/pages"
	"github.com/agentbus/agentbus/pkg/problem"
)

// playgroundPath is where the playground page is served; its files are below it.
const playgroundPath = "/ui"

// playgroundPage serves GET /ui, the playground page (package pages). It takes no key: the
// page asks for one and uses the API like any client.
func (s *Server) playgroundPage(w http.ResponseWriter, r *http.Request) {
	pages.Playground.Serve(w, r, "")
}

// playgroundFile serves GET /ui/{file}, the page's script, style sheet and icon.
func (s *Server) playgroundFile(w http.ResponseWriter, r *http.Request) {
	if !pages.Playground.Serve(w, r, r.PathValue("file")) {
		problem.NotFound.Write(w, "no such endpoint")
	}
}

// toPlayground redirects GET / and GET /ui/ to the playground, so that a newcomer who opens the
// ingress's address in a browser finds it. The redirect is not permanent: / may serve something
// else one day.
func (s *Server) toPlayground(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, playgroundPath, http.StatusFound)
}

// consolePath is where the operator console is served; its files are below it.
const consolePath = "/console"

// consolePage serves GET /console, the operator console (package pages). Like the playground
// it takes no key: the page asks for an admin key and calls the admin API with it.
func (s *Server) consolePage(w http.ResponseWriter, r *http.Request) {
	pages.Console.Serve(w, r, "")
}

// consoleFile serves GET /console/{file}, the console's script, style sheet and icon.
func (s *Server) consoleFile(w http.ResponseWriter, r *http.Request) {
	if !pages.Console.Serve(w, r, r.PathValue("file")) {
		problem.NotFound.Write(w, "no such endpoint")
	}
}

// toConsole redirects GET /console/ to the console's one address.
func (s *Server) toConsole(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, consolePath, http.StatusFound)
}
