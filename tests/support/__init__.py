"""What envbuild's tests share: paths and pins (constants), one fake engine (fakes), fake hosts (hosts), the
test bed of a local registry, a debootstrap base and a wheelhouse (testbed), and the real-engine fixtures
(fixtures, a pytest plugin). Nothing here ships with envbuild."""
