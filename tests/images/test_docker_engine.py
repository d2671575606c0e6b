"""devtools/docker_engine.py's pure parts (cheap, in `make test`); the engine itself runs in tests/images/
test_containers.py (`make test-containers`)."""
from devtools import docker_engine


def test_the_mirror_is_apts_own_for_the_suite_in_either_sources_format(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
                      "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n")
    assert docker_engine.debian_mirror([deb822]) == "http://mirror.example/debian"
    one_line = tmp_path / "sources.list"
    one_line.write_text("# a comment\ndeb http://security.example/debian-security bookworm-security main\n"
                        "deb http://other.example/debian bookworm main\n")
    assert docker_engine.debian_mirror([tmp_path / "missing", one_line]) == "http://other.example/debian"
    assert docker_engine.debian_mirror([]) == "http://deb.debian.org/debian"


def test_mounts_under_a_folder_come_deepest_first():
    points = docker_engine._mounts_under(__import__("pathlib").Path("/proc"))
    assert "/proc" in points and points == sorted(points, key=len, reverse=True)


def test_a_failed_build_names_its_step():
    output = ("Step 1/3 : FROM base\n ---> 1\nStep 2/3 : RUN apt-get install -y nosuchpackage\n"
              "E: Unable to locate package nosuchpackage\n")
    assert docker_engine.failed_step(output) == ("Step 2/3 : RUN apt-get install -y nosuchpackage: "
                                                 "E: Unable to locate package nosuchpackage")


def test_a_build_out_of_disk_says_where_and_how_much(tmp_path):
    engine = docker_engine.Engine(folder=tmp_path, socket=tmp_path / "docker.sock", data_root=tmp_path,
                                  log=tmp_path / "dockerd.log")
    hint = docker_engine._space_hint(engine, "Error processing tar file(exit status 1): write /x: no space left on device")
    assert str(tmp_path) in hint and "GB free" in hint and f"{docker_engine.BUILD_SPACE_GB} GB" in hint
    assert docker_engine._space_hint(engine, "E: Unable to locate package nosuchpackage") == ""
