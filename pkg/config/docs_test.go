package config

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configurationDoc is the page that documents every setting.
const configurationDoc = "../../docs/configuration.md"

// documentedSetting is one row of the settings table of docs/configuration.md.
type documentedSetting struct {
	flag, def string
	line      int
}

// TestDocumentedSettings keeps docs/configuration.md's settings table and the settings Load reads
// in step: every setting has a row, every row is a setting, and each row names the setting's flag
// and default as the code has them. A default changed in the code fails here until the page says
// the same.
func TestDocumentedSettings(t *testing.T) {
	documented := readSettingsTable(t, configurationDoc)
	for _, s := range (&Config{}).settings() {
		d, ok := documented[s.env]
		if !assert.True(t, ok, "%s: no row for %s (flag -%s, default %q)", configurationDoc, s.env, s.flag, s.def) {
			continue
		}
		assert.Equal(t, "-"+s.flag, d.flag, "%s:%d: flag of %s", configurationDoc, d.line, s.env)
		assert.Equal(t, s.def, d.def, "%s:%d: default of %s", configurationDoc, d.line, s.env)
		delete(documented, s.env)
	}
	for env, d := range documented {
		t.Errorf("%s:%d: %s is documented but is not a setting of package config", configurationDoc, d.line, env)
	}
}

// readSettingsTable reads the table of the "## Settings" section, whose columns start with
// variable, flag and default. Cells are code spans; a default of "empty" is the empty string.
func readSettingsTable(t *testing.T, path string) map[string]documentedSetting {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err, "opening the configuration page")
	defer f.Close()
	rows := make(map[string]documentedSetting)
	inSection, inTable := false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inSection, inTable = line == "## Settings", false
			continue
		}
		if !inSection || !strings.HasPrefix(line, "|") {
			inTable = inTable && line == ""
			continue
		}
		cells := tableCells(line)
		switch {
		case len(cells) >= 3 && cells[0] == "variable" && cells[1] == "flag" && cells[2] == "default":
			inTable = true
		case !inTable || strings.Trim(cells[0], "-: ") == "":
			// Not the settings table, or its delimiter row.
		default:
			require.GreaterOrEqual(t, len(cells), 3, "%s:%d: a row needs variable, flag and default", path, n)
			env, def := code(cells[0]), code(cells[2])
			if cells[2] == "empty" {
				def = ""
			}
			require.NotContains(t, rows, env, "%s:%d: %s is listed twice", path, n, env)
			rows[env] = documentedSetting{flag: code(cells[1]), def: def, line: n}
		}
	}
	require.NoError(t, sc.Err(), "reading the configuration page")
	require.NotEmpty(t, rows, "%s: no settings table under \"## Settings\"", path)
	return rows
}

// tableCells splits a Markdown table row into its trimmed cells.
func tableCells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(row), "|"), "|")
	cells := strings.Split(row, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(c)
	}
	return cells
}

// code returns the text of a cell that is one code span, and any other cell as it is.
func code(cell string) string {
	if len(cell) >= 2 && strings.HasPrefix(cell, "`") && strings.HasSuffix(cell, "`") {
		return cell[1 : len(cell)-1]
	}
	return cell
}
