// strata-helm-render renders a Helm chart's templates without Helm, for tests on machines
// where only Debian packages exist (Debian 12 ships no helm): Go's text/template, the sprig
// functions (golang-github-masterminds-sprig-dev) and YAML (golang-gopkg-yaml.v3-dev), plus the
// Helm built-ins Strata's chart uses:
//
//	objects    .Values .Release .Chart .Template .Capabilities.KubeVersion
//	functions  include tpl required fail toYaml fromYaml lookup (returns an empty map)
//	behaviour  values files merged in order (maps deep-merge, null deletes a key), --set a.b=v,
//	           missing keys render as empty, files starting with "_" define templates only,
//	           empty documents are dropped, each output starts "---\n# Source: <chart>/<file>".
//
// Build offline in GOPATH mode against Debian's Go sources:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o strata-helm-render main.go
//
// Usage: strata-helm-render --chart DIR [-f values.yaml]... [--set key=value]...
//
//	[--name RELEASE] [--namespace NS]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func readYAMLMap(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return m, nil
}

// mergeInto merges src into dst like Helm: maps recursively, other values replace, null deletes.
func mergeInto(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sv, srcIsMap := v.(map[string]interface{})
		dv, dstIsMap := dst[k].(map[string]interface{})
		if srcIsMap && dstIsMap {
			mergeInto(dv, sv)
		} else {
			dst[k] = v
		}
	}
}

// setValue applies one --set a.b.c=value (the value parsed as a YAML scalar).
func setValue(values map[string]interface{}, assignment string) error {
	eq := strings.IndexByte(assignment, '=')
	if eq <= 0 {
		return fmt.Errorf("--set %q: want key=value", assignment)
	}
	var value interface{}
	if err := yaml.Unmarshal([]byte(assignment[eq+1:]), &value); err != nil {
		return fmt.Errorf("--set %q: %v", assignment, err)
	}
	keys := strings.Split(assignment[:eq], ".")
	m := values
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = value
	return nil
}

func toYAML(v interface{}) string {
	var b bytes.Buffer
	e := yaml.NewEncoder(&b)
	e.SetIndent(2)
	if err := e.Encode(v); err != nil {
		return ""
	}
	e.Close()
	return strings.TrimSuffix(b.String(), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// funcMap returns sprig's functions (without env access, as Helm) plus Helm's, whose include
// and tpl run against *root.
func funcMap(root **template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["include"] = func(name string, data interface{}) (string, error) {
		var b strings.Builder
		err := (*root).ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := (*root).Clone()
		if err != nil {
			return "", err
		}
		if t, err = t.New("tpl").Parse(text); err != nil {
			return "", err
		}
		var b strings.Builder
		err = t.Execute(&b, data)
		return b.String(), err
	}
	f["required"] = func(message string, v interface{}) (interface{}, error) {
		if s, isString := v.(string); v == nil || (isString && s == "") {
			return nil, errors.New(message)
		}
		return v, nil
	}
	f["lookup"] = func(...string) map[string]interface{} { return map[string]interface{}{} }
	return f
}

type options struct {
	chart, name, namespace string
	valueFiles, sets       listFlag
}

func render(o options) (string, error) {
	chartMeta, err := readYAMLMap(filepath.Join(o.chart, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	values, err := readYAMLMap(filepath.Join(o.chart, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, path := range o.valueFiles {
		extra, err := readYAMLMap(path)
		if err != nil {
			return "", err
		}
		mergeInto(values, extra)
	}
	for _, s := range o.sets {
		if err := setValue(values, s); err != nil {
			return "", err
		}
	}
	chartName := fmt.Sprint(chartMeta["name"])
	chart := map[string]interface{}{}
	for k, v := range chartMeta { // Helm exposes Chart.yaml keys capitalised: .Chart.AppVersion
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}

	files, err := filepath.Glob(filepath.Join(o.chart, "templates", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	var root *template.Template
	root = template.New(chartName).Funcs(funcMap(&root)).Option("missingkey=zero")
	var names []string
	for _, path := range files {
		text, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		name := chartName + "/templates/" + filepath.Base(path)
		if _, err := root.New(name).Parse(string(text)); err != nil {
			return "", err
		}
		base := filepath.Base(path)
		if !strings.HasPrefix(base, "_") && (strings.HasSuffix(base, ".yaml") ||
			strings.HasSuffix(base, ".yml")) {
			names = append(names, name)
		}
	}

	var out strings.Builder
	for _, name := range names {
		data := map[string]interface{}{
			"Values": values,
			"Chart":  chart,
			"Release": map[string]interface{}{"Name": o.name, "Namespace": o.namespace,
				"Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
			"Template": map[string]interface{}{"Name": name,
				"BasePath": chartName + "/templates"},
			"Capabilities": map[string]interface{}{"KubeVersion": map[string]interface{}{
				"Version": "v1.29.0", "Major": "1", "Minor": "29"}},
		}
		var b strings.Builder
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			return "", err
		}
		doc := strings.ReplaceAll(b.String(), "<no value>", "")
		if strings.TrimSpace(doc) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.Trim(doc, "\n"))
	}
	return out.String(), nil
}

func main() {
	var o options
	flag.StringVar(&o.chart, "chart", "", "chart directory (holds Chart.yaml, values.yaml, templates/)")
	flag.StringVar(&o.name, "name", "strata", "release name")
	flag.StringVar(&o.namespace, "namespace", "default", "release namespace")
	flag.Var(&o.valueFiles, "f", "values file merged over values.yaml (repeatable)")
	flag.Var(&o.sets, "set", "key.path=value override (repeatable)")
	flag.Parse()
	if o.chart == "" {
		fmt.Fprintln(os.Stderr, "usage: strata-helm-render --chart DIR [-f values.yaml]... [--set k=v]...")
		os.Exit(2)
	}
	out, err := render(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}
