package cli

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/plugin"
	"github.com/globalmirror/globalmirror/plugin/global"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A CoreDNS pod's Corefile is read as the pod reads it: from the ConfigMap
// volume its -conf names, with the files its `import` lines name from the
// pod's other ConfigMap volumes (AKS and k3s keep custom stanzas in an
// optional coredns-custom ConfigMap that the Corefile imports). Nothing is
// read from the operator's own filesystem: the files are written to a
// directory of the command's, and every import is pointed into it.

// corefileOf is the ConfigMap and key of the Corefile a CoreDNS pod loads
// (its -conf, in a ConfigMap volume).
func corefileOf(p *corev1.Pod) (configMap, key string) {
	if len(p.Spec.Containers) == 0 {
		return "", ""
	}
	ctr := DNSContainer(p)
	dir, file := path.Split(confPath(ctr))
	for _, m := range ctr.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			key := file
			for _, it := range v.ConfigMap.Items {
				if it.Path == file {
					key = it.Key
				}
			}
			return v.ConfigMap.Name, key
		}
	}
	return "", ""
}

// confPath is the Corefile's path in the container: its -conf, where a
// relative path is from CoreDNS's working directory, the root.
// defaultConf is CoreDNS's Corefile where no -conf names one.
const defaultConf = "/Corefile"

func confPath(c *corev1.Container) string {
	conf := "Corefile" // CoreDNS's default
	args := append(slices.Clone(c.Command), c.Args...)
	for i, a := range args {
		if (a == "-conf" || a == "--conf") && i+1 < len(args) {
			conf = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "-conf="); ok {
			conf = v
		}
	}
	return path.Clean("/" + conf)
}

// podFiles are what a CoreDNS pod's container sees of its volumes.
type podFiles struct {
	// Conf is the Corefile's path.
	Conf string
	// Files are the files of its ConfigMap volumes, by path.
	Files map[string]string
	// Mounts are its volumes' mount paths, each with what check cannot
	// read there ("" for a ConfigMap read, or one optional and absent).
	Mounts map[string]string
	// ConfigMaps are the ConfigMaps mounted, by mount path (a projected
	// volume's first), for a hint that names where to write.
	ConfigMaps map[string]string
}

// readPodFiles reads the ConfigMaps p mounts into its CoreDNS container
// with get; one it cannot read is a mount it says so of.
func readPodFiles(p *corev1.Pod, get func(name string) (*corev1.ConfigMap, error)) *podFiles {
	ctr := DNSContainer(p)
	pf := &podFiles{Conf: confPath(ctr), Files: map[string]string{}, Mounts: map[string]string{}, ConfigMaps: map[string]string{}}
	volumes := map[string]*corev1.Volume{}
	for i := range p.Spec.Volumes {
		volumes[p.Spec.Volumes[i].Name] = &p.Spec.Volumes[i]
	}
	for _, m := range ctr.VolumeMounts {
		at := path.Clean(m.MountPath)
		v := volumes[m.Name]
		if v == nil || (v.ConfigMap == nil && v.Projected == nil) {
			pf.Mounts[at] = "a volume that is no ConfigMap (" + m.Name + ")"
			continue
		}
		var sources []corev1.ConfigMapProjection
		if v.ConfigMap != nil {
			sources = append(sources, corev1.ConfigMapProjection{LocalObjectReference: v.ConfigMap.LocalObjectReference, Items: v.ConfigMap.Items, Optional: v.ConfigMap.Optional})
		} else {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					sources = append(sources, *s.ConfigMap)
				} else {
					pf.Mounts[at] = "a projected volume of more than ConfigMaps (" + m.Name + ")"
				}
			}
		}
		if pf.Mounts[at] != "" {
			continue
		}
		pf.Mounts[at] = ""
		if len(sources) > 0 {
			pf.ConfigMaps[at] = sources[0].Name
		}
		for _, src := range sources {
			cm, err := get(src.Name)
			if apierrors.IsNotFound(err) && src.Optional != nil && *src.Optional {
				cm, err = &corev1.ConfigMap{}, nil // mounted empty, as k3s's coredns-custom
			}
			if err != nil {
				pf.Mounts[at] = fmt.Sprintf("ConfigMap %s/%s, which could not be read (%s)", p.Namespace, src.Name, errMessage(err))
				break
			}
			files := map[string]string{} // path in the volume → key
			for k := range cm.Data {
				files[k] = k
			}
			if len(src.Items) > 0 {
				files = map[string]string{}
				for _, it := range src.Items {
					files[it.Path] = it.Key
				}
			}
			for file, key := range files {
				if m.SubPath != "" {
					if file == m.SubPath {
						pf.Files[at] = cm.Data[key]
					}
					continue
				}
				pf.Files[path.Join(at, file)] = cm.Data[key]
			}
		}
	}
	return pf
}

// mountOf is the mount path under which the container sees p, and
// whether there is one.
func (pf *podFiles) mountOf(p string) (string, bool) {
	best, found := "", false
	for at := range pf.Mounts {
		if (p == at || strings.HasPrefix(p, strings.TrimSuffix(at, "/")+"/")) && len(at) >= len(best) {
			best, found = at, true
		}
	}
	return best, found
}

var (
	importLine  = regexp.MustCompile(`(?m)^([ \t]*)import[ \t]+(\S+)[ \t]*$`)
	snippetLine = regexp.MustCompile(`(?m)^[ \t]*\(([^)\s]+)\)`)
)

// parseCorefile parses corefile, which a pod loads from pf.Conf, with what
// its imports name from pf (nil: no volume read). Unread are the imports
// it could not follow, each saying why; the parse goes on without them.
func parseCorefile(corefile string, pf *podFiles) (blocks []caddyfile.ServerBlock, unread []string, err error) {
	if pf == nil {
		pf = &podFiles{Conf: "/etc/coredns/Corefile"}
	}
	root, err := os.MkdirTemp("", "globalmirror-corefile-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(root)
	snippets := map[string]bool{}
	for _, text := range append(slices.Collect(maps.Values(pf.Files)), corefile) {
		for _, m := range snippetLine.FindAllStringSubmatch(text, -1) {
			snippets[m[1]] = true
		}
	}
	// pointed is text with each file import pointed into root, or
	// blanked (its line kept, so that errors name the right lines) where
	// the file is somewhere check cannot read.
	pointed := func(file, text string) string {
		return importLine.ReplaceAllStringFunc(text, func(line string) string {
			m := importLine.FindStringSubmatch(line)
			arg := strings.Trim(m[2], `"`)
			if snippets[arg] {
				return line
			}
			abs := arg
			if !path.IsAbs(abs) {
				abs = path.Join(path.Dir(file), abs)
			}
			abs = path.Clean("/" + abs)
			at, mounted := pf.mountOf(path.Dir(abs))
			why := pf.Mounts[at]
			if !mounted {
				why = "the image's own filesystem (no volume is mounted there)"
			}
			if why != "" {
				unread = append(unread, fmt.Sprintf("%s: import %s reads %s, which check cannot read", file, arg, why))
				return ""
			}
			if strings.ContainsAny(abs, "*?[") && !slices.ContainsFunc(slices.Collect(maps.Keys(pf.Files)), func(p string) bool {
				ok, _ := path.Match(abs, p)
				return ok
			}) {
				return "" // a pattern that matches nothing imports nothing (caddy would log that it did not)
			}
			return m[1] + "import " + filepath.Join(root, filepath.FromSlash(abs))
		})
	}
	for p, text := range pf.Files {
		if p == pf.Conf {
			continue
		}
		at := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(at, []byte(pointed(p, text)), 0o600); err != nil {
			return nil, nil, err
		}
	}
	blocks, err = caddyfile.Parse(filepath.Join(root, filepath.FromSlash(pf.Conf)), strings.NewReader(pointed(pf.Conf, corefile)), nil)
	if err != nil {
		return nil, unread, errors.New(strings.ReplaceAll(err.Error(), root, ""))
	}
	// Each token names the file it came from as the pod sees it.
	for _, b := range blocks {
		for _, toks := range b.Tokens {
			for i := range toks {
				toks[i].File = filepath.ToSlash(strings.TrimPrefix(toks[i].File, root))
			}
		}
	}
	return blocks, unread, nil
}

// serverBlock is one server block of a Corefile: its keys and the tokens
// of each of its plugins.
type serverBlock = caddyfile.ServerBlock

// kubernetesZones are the zones the kubernetes plugin of b serves: its
// arguments, or else the block's keys, as the plugin reads them.
func kubernetesZones(b *serverBlock) []string {
	toks := b.Tokens["kubernetes"]
	var args []string
	for _, tok := range toks[min(1, len(toks)):] {
		if tok.Line != toks[0].Line || tok.Text == "{" {
			break
		}
		args = append(args, tok.Text)
	}
	return plugin.OriginsFromArgsOrServerBlock(args, b.Keys)
}

// clusterBlock is the server block of corefile that answers the cluster
// domain (the one with the kubernetes plugin), and the global stanza in it
// if there is one; unread, the imports it could not follow.
func clusterBlock(corefile string, pf *podFiles) (b *serverBlock, st *global.Stanza, unread []string, err error) {
	return blockWith("kubernetes", corefile, pf)
}

// globalBlock is the server block of corefile with the global plugin, and
// its stanza: a forwarded DNS's, which serves no cluster domain.
func globalBlock(corefile string, pf *podFiles) (b *serverBlock, st *global.Stanza, unread []string, err error) {
	return blockWith("global", corefile, pf)
}

// blockWith is the first server block of corefile with the plugin named
// directive, and the global stanza in it if there is one, parsed as
// CoreDNS parses it.
func blockWith(directive, corefile string, pf *podFiles) (b *serverBlock, st *global.Stanza, unread []string, err error) {
	blocks, unread, err := parseCorefile(corefile, pf)
	if err != nil {
		return nil, nil, unread, err
	}
	for i := range blocks {
		b := &blocks[i]
		if _, ok := b.Tokens[directive]; !ok {
			continue
		}
		toks, ok := b.Tokens["global"]
		if !ok {
			return b, nil, unread, nil
		}
		st, err := global.ParseStanza(b.Keys, toks)
		if err != nil {
			return b, nil, unread, err
		}
		return b, &st, unread, nil
	}
	return nil, nil, unread, errors.New("no server block with the " + directive + " plugin")
}

// DNSContainer is a cluster DNS pod's CoreDNS container, found by what it
// is, not by its place among the pod's containers (a mesh's proxy or a log
// shipper may come first): the one that serves DNS on port 53, else the one
// given a Corefile (-conf), else the one named coredns, else the first.
func DNSContainer(p *corev1.Pod) *corev1.Container {
	cs := p.Spec.Containers
	for _, is := range []func(c *corev1.Container) bool{
		func(c *corev1.Container) bool {
			return slices.ContainsFunc(c.Ports, func(port corev1.ContainerPort) bool { return port.ContainerPort == 53 })
		},
		func(c *corev1.Container) bool { return confPath(c) != defaultConf },
		func(c *corev1.Container) bool { return c.Name == "coredns" },
	} {
		for i := range cs {
			if is(&cs[i]) {
				return &cs[i]
			}
		}
	}
	return &cs[0]
}
