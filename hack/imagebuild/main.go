// Command imagebuild writes a single-layer container image as a docker-archive tarball (the
// format of `docker save`, accepted by `ctr image import` and `docker load`) from a root
// filesystem directory. No Docker engine and no registry are involved.
//
//	imagebuild -rootfs DIR -tag NAME:TAG -o IMAGE.tar [-entrypoint '["/airlock"]'] [-cmd '[...]']
//	           [-user 65532:65532] [-env K=V]... [-workdir DIR]
//
// The archive holds manifest.json, the image config (<sha256>.json) and one <sha256>/layer.tar.
// The layer keeps the rootfs's modes, owners, symlinks and hard links (so a tree made with
// `cp -a` stays small); all times are set to SOURCE_DATE_EPOCH (default 0) so that the same
// rootfs gives the same image ID.
package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var (
		rootfs     = flag.String("rootfs", "", "root filesystem directory of the single layer (required)")
		tag        = flag.String("tag", "", "image name:tag, e.g. ghcr.io/airlock-dev/airlock:v0.1.0 (required)")
		out        = flag.String("o", "", "output docker-archive tar (required)")
		entrypoint = flag.String("entrypoint", "", `ENTRYPOINT as a JSON array, e.g. '["/airlock"]'`)
		cmd        = flag.String("cmd", "", "CMD as a JSON array")
		user       = flag.String("user", "", "USER, e.g. 65532:65532")
		workdir    = flag.String("workdir", "", "WORKDIR")
		env        stringList
	)
	flag.Var(&env, "env", "ENV K=V (repeatable); PATH defaults to the usual list")
	flag.Parse()
	if *rootfs == "" || *tag == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if !strings.Contains(*tag, ":") || strings.HasSuffix(*tag, ":latest") {
		fail(fmt.Errorf("tag %q: give an explicit, non-latest tag (a :latest image is always pulled)", *tag))
	}
	cfg := imageConfig{Env: env, User: *user, WorkingDir: *workdir}
	if !hasEnv(cfg.Env, "PATH") {
		cfg.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, cfg.Env...)
	}
	var err error
	if cfg.Entrypoint, err = jsonList("entrypoint", *entrypoint); err != nil {
		fail(err)
	}
	if cfg.Cmd, err = jsonList("cmd", *cmd); err != nil {
		fail(err)
	}
	if err := build(*rootfs, *tag, *out, cfg, epoch()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}

func hasEnv(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

func jsonList(name, v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var l []string
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		return nil, fmt.Errorf("-%s: want a JSON array of strings: %w", name, err)
	}
	return l, nil
}

func epoch() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Unix(0, 0).UTC()
}

// imageConfig is the "config" part of the OCI/Docker image config.
type imageConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type image struct {
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Created      time.Time   `json:"created"`
	Config       imageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

func build(rootfs, tag, out string, cfg imageConfig, mtime time.Time) error {
	if fi, err := os.Stat(rootfs); err != nil || !fi.IsDir() {
		return fmt.Errorf("rootfs %s is not a directory", rootfs)
	}
	// The layer goes to a temporary file first: its digest names it inside the archive.
	layer, err := os.CreateTemp(filepath.Dir(out), ".layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(layer.Name())
	defer layer.Close()
	h := sha256.New()
	if err := writeLayer(io.MultiWriter(layer, h), rootfs, mtime); err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	layerDigest := hex.EncodeToString(h.Sum(nil))

	img := image{Architecture: runtime.GOARCH, OS: "linux", Created: mtime, Config: cfg}
	img.RootFS.Type = "layers"
	img.RootFS.DiffIDs = []string{"sha256:" + layerDigest}
	config, err := json.Marshal(img)
	if err != nil {
		return err
	}
	configName := sum(config) + ".json"
	layerName := layerDigest + "/layer.tar"
	manifest, err := json.Marshal([]manifestEntry{{Config: configName, RepoTags: []string{tag}, Layers: []string{layerName}}})
	if err != nil {
		return err
	}

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	if err := addBytes(tw, configName, config, mtime); err != nil {
		return err
	}
	st, err := layer.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: layerDigest + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: layerName, Typeflag: tar.TypeReg, Mode: 0o644, Size: st.Size(), ModTime: mtime}); err != nil {
		return err
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return err
	}
	if err := addBytes(tw, "manifest.json", manifest, mtime); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("%s: %s (image id sha256:%s, layer %d MiB)\n", out, tag, strings.TrimSuffix(configName, ".json"), st.Size()>>20)
	return nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func addBytes(tw *tar.Writer, name string, b []byte, mtime time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), ModTime: mtime}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// writeLayer writes rootfs as a tar stream, in lexical order, names relative to the root.
func writeLayer(w io.Writer, rootfs string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{} // hard links: the first name written for an inode
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(rootfs, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = mtime, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				key := inode{uint64(st.Dev), st.Ino}
				if first, ok := seen[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = rel
				}
			}
		}
		if fi.Mode()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			return fmt.Errorf("%s: special files are not supported", path)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != hdr.Size {
			err = errors.New("file changed while being read")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
