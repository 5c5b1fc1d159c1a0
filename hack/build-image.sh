#!/usr/bin/env bash
# Build gangq's controller image from deploy/Dockerfile on a machine without a Docker engine.
#
#   bash hack/build-image.sh        # the LAST line of its output is the local image reference
#
# Tools: buildah, debootstrap and Debian's archive keyring (Debian: apt-get install buildah
# debootstrap debian-archive-keyring), run as root.
# Rules, and why:
# - buildah runs with chroot isolation and vfs storage: they need neither a container runtime's
#   namespaces nor overlay mounts, which sandboxed machines refuse.
# - The base image that the Dockerfile's FROM line names (docker.io/library/debian:bookworm-slim)
#   is made here with debootstrap from Debian's packages and tagged with that name, so that the
#   same Dockerfile builds here and with `docker build` against the registry; the build never
#   pulls (--pull never).
# - The Debian mirror is the one this machine's apt uses (override: GANGQ_DEBIAN_MIRROR and
#   GANGQ_DEBIAN_SECURITY_MIRROR); pip reaches its index as this machine's pip does (its index
#   and CA settings go in as the Dockerfile's optional build secrets, kept in no layer).
# - Images are kept in $GANGQ_IMAGE_CACHE (default ~/.cache/gangq/image) and keyed by digests of
#   their inputs: the base by its recipe below, the image by the base, the Dockerfile and every
#   file the Dockerfile copies. A run whose key is already built is a no-op.
set -euo pipefail

cd "$(dirname "$0")/.."

dockerfile=deploy/Dockerfile
# The build context is what the Dockerfile's COPY lines name (not those --from a stage), staged
# from the files git would commit (tracked, and untracked but not ignored): stray build outputs
# and caches in the work tree neither enter the image nor change its key.
mapfile -t context_paths < <(
  awk 'toupper($1) == "COPY" && $2 !~ /^--from/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' "$dockerfile"
)

cache="${GANGQ_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangq/image}"
repository=localhost/gangq

say() { echo "build-image: $*" >&2; }

bh=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs)
bh() { "${bh[@]}" "$@"; }
export BUILDAH_ISOLATION=chroot

for tool in buildah debootstrap git sha256sum; do
  command -v "$tool" >/dev/null || { say "$tool is not installed (Debian: apt-get install buildah debootstrap)"; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { say "run as root: debootstrap and buildah's vfs storage need it"; exit 1; }

# --- the base image ---------------------------------------------------------------------------

# Every FROM line names the same Debian image; its tag gives the suite (bookworm-slim → bookworm).
base=$(awk 'toupper($1) == "FROM" && $2 !~ /^\$/ {print $2}' "$dockerfile" | sort -u)
[[ $(wc -l <<<"$base") -eq 1 && $base == docker.io/library/debian:* ]] \
  || { say "$dockerfile must use one base, docker.io/library/debian:<suite>-slim (has: $base)"; exit 1; }
suite=${base##*:}
suite=${suite%-slim}

# The first URI of this machine's apt sources that serves `suite` (deb822 .sources files and
# one-line sources.list entries), else Debian's own.
apt_mirror() {
  local want=$1 fallback=$2 found="" files=()
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    if [[ -f $file ]]; then files+=("$file"); fi
  done
  if [[ ${#files[@]} -gt 0 ]]; then
    found=$(awk -v want="$want" '
      FNR == 1 { uris = ""; suites = "" }
      /^[ \t]*#/ { next }
      FILENAME ~ /\.sources$/ {                      # deb822: stanzas of "Field: value" lines
        if ($0 ~ /^[ \t]*$/) { uris = ""; suites = ""; next }
        if ($1 == "URIs:") uris = $2
        if ($1 == "Suites:") suites = $0 " "
        if (uris != "" && index(suites, " " want " ")) { print uris; exit }
        next
      }
      $1 == "deb" {                                  # deb [options] URI suite components...
        i = 2
        if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == want) { print $i; exit }
      }
    ' "${files[@]}")
  fi
  echo "${found:-$fallback}"
}
mirror=${GANGQ_DEBIAN_MIRROR:-$(apt_mirror "$suite" http://deb.debian.org/debian)}
security_mirror=${GANGQ_DEBIAN_SECURITY_MIRROR:-$(apt_mirror "$suite-security" http://deb.debian.org/debian-security)}

# The base: debootstrap's minbase of `suite` with its security updates, slimmed as Debian's
# official -slim images are (no documentation, manual pages or translations, no package lists),
# with apt sources for the suite, its updates and its security suite.
make_base() {
  local name=$1 key=$2 ctr mnt
  bh rm gangq-base-work >/dev/null 2>&1 || true
  ctr=$(bh from --name gangq-base-work scratch)
  mnt=$(bh mount "$ctr")
  # The archive's signature is checked against Debian's keyring (a missing keyring fails).
  debootstrap --variant=minbase --components=main --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$suite" "$mnt" "$mirror" >&2
  rm -f "$mnt/etc/resolv.conf" "$mnt/etc/hostname" "$mnt/etc/apt/sources.list"
  cat >"$mnt/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Later installs leave out the same files as the slimming below; apt keeps no archives and no
  # binary caches of its package lists.
  cat >"$mnt/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
  cat >"$mnt/etc/apt/apt.conf.d/slim" <<'EOF'
APT::Keep-Downloaded-Packages "false";
Acquire::Languages "none";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  bh run "$ctr" -- sh -ec '
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get dist-upgrade -y -qq
    apt-get clean
    find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
    find /usr/share/doc -mindepth 1 -type d -empty -delete
    rm -rf /usr/share/man/* /usr/share/info/* /usr/share/groff/* /usr/share/lintian/* /usr/share/locale/*
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/lib/dpkg/*-old
    find /var/log -type f -delete
  ' >&2
  bh umount "$ctr" >/dev/null
  bh config --cmd bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label io.gangq.base-key="$key" "$ctr"
  bh commit --rm --quiet "$ctr" "$name" >/dev/null
}

label() { bh inspect --type image --format "{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

# The base's key: its recipe (the function above) and what it is made of.
base_key=$( { declare -f make_base; echo "$suite"; } | sha256sum | cut -c1-16)
mkdir -p "$cache"
# One build at a time per cache: concurrent runs would race on the same names.
exec 9>"$cache/lock"
flock 9

started=$SECONDS
if [[ $(label "$base" io.gangq.base-key) != "$base_key" ]]; then
  say "making $base from Debian's packages (debootstrap $suite from $mirror)"
  make_base "$base" "$base_key"
  say "made $base in $((SECONDS - started)) s"
fi
base_id=$(bh inspect --type image --format '{{.FromImageID}}' "$base")

# --- the image --------------------------------------------------------------------------------

context=$(mktemp -d)
trap 'rm -rf "$context" "$context.files" "$context.pip.conf"' EXIT
git ls-files -z --cached --others --exclude-standard -- "${context_paths[@]}" \
  | while IFS= read -r -d '' path; do if [[ -f $path ]]; then printf '%s\0' "$path"; fi; done \
  | LC_ALL=C sort -z >"$context.files"
xargs -0 -a "$context.files" cp --parents -t "$context"
key=$( { echo "$base_id"; sha256sum "$dockerfile"; xargs -0 -a "$context.files" sha256sum; } | sha256sum | cut -c1-16)
image="$repository:$key"

if [[ $(label "$image" io.gangq.image-key) == "$key" ]]; then
  say "cached: $image"
else
  # pip's index and CA as this machine's pip has them, as the Dockerfile's optional build secrets.
  secrets=()
  pip_setting() {  # the environment's PIP_<NAME>, else pip's configuration
    local env="PIP_${1^^}"
    env=${env//-/_}
    if [[ -n ${!env:-} ]]; then echo "${!env}"; else python3 -m pip config get "global.$1" 2>/dev/null || true; fi
  }
  echo "[global]" >"$context.pip.conf"
  for setting in index-url extra-index-url trusted-host; do
    value=$(pip_setting "$setting")
    if [[ -n $value ]]; then echo "$setting = $value" >>"$context.pip.conf"; fi
  done
  if [[ $(wc -l <"$context.pip.conf") -gt 1 ]]; then secrets+=(--secret "id=pip.conf,src=$context.pip.conf"); fi
  ca=$(pip_setting cert)
  if [[ -n $ca && -f $ca ]]; then secrets+=(--secret "id=pip-ca,src=$ca"); fi
  say "building $image from $dockerfile"
  bh build --pull=never --layers=false --format oci --file "$dockerfile" \
    --label io.gangq.image-key="$key" "${secrets[@]}" --tag "$image" "$context" >&2
  say "built $image in $((SECONDS - started)) s"
  # The cache keeps one image: the others of the repository and untagged ones (a replaced base)
  # would take half a gigabyte each.
  bh images --format '{{.Name}}:{{.Tag}}' | grep "^$repository:" | grep -vxF "$image" \
    | xargs -r "${bh[@]}" rmi >/dev/null || true
  bh rmi --prune >/dev/null || true
fi
bh inspect --type image --format '{{.FromImageID}}' "$image" >/dev/null
echo "$image"
