"""Bytes of the layers an image has that another lacks: what a host holding the old image pulls
to run the new one (the layer check of scripts/docker-build-check.sh).

    docker save NEW | python scripts/layer_sizes.py OLD_DIFF_IDS_FILE

OLD_DIFF_IDS_FILE lists the old image's layer digests (`docker image inspect --format
'{{range .RootFS.Layers}}{{println .}}{{end}}'`). Prints the new layers' total size in bytes,
then one line per new layer (its size and the instruction that made it is in `docker history`).
"""

import json
import sys
import tarfile


def main() -> int:
    with open(sys.argv[1]) as f:
        old = {line.strip() for line in f if line.strip()}
    sizes, manifest, configs = {}, None, {}
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as archive:
        for member in archive:
            if member.name.endswith("layer.tar") or member.name.startswith("blobs/"):
                sizes[member.name] = member.size
            elif member.name == "manifest.json":
                manifest = json.load(archive.extractfile(member))
            elif member.name.endswith(".json") and member.isfile():
                configs[member.name] = json.load(archive.extractfile(member))
    entry = manifest[0]
    config = configs.get(entry["Config"]) or {}
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    new = [
        (layer, sizes.get(layer, 0))
        for layer, diff_id in zip(entry["Layers"], diff_ids, strict=False)
        if diff_id not in old
    ]
    print(sum(size for _, size in new))
    for layer, size in new:
        print(f"{size} {layer}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
