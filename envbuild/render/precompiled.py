# Generated from templates/Dockerfile.j2 by `python -m envbuild.render.precompile`: do not edit.
# Used only while KEY matches the template, Jinja's version and render's settings; else the source is
# compiled at start, as before. tests/unit/test_render.py fails while this file is stale.
# ruff: noqa
KEY = '9074db5c0e726898e806a9fb5efafffffa96edef08bf0f712e1c9279ecd017fe'
SOURCE = '59e80dc7c2c84c14e0b92748af08915a9eeab254ec3e7014d39b0dbd15bb6032'  # the template's sha256
JINJA = '3.1.6'


def namespace(environment):
    from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
    name = 'Dockerfile.j2'

    def root(context, missing=missing, environment=environment):
        resolve = context.resolve_or_missing
        undefined = environment.undefined
        concat = environment.concat
        cond_expr_undefined = Undefined
        if 0: yield None
        l_0_matrix_name = resolve('matrix_name')
        l_0_b = resolve('b')
        l_0_transformers = resolve('transformers')
        l_0_accelerate = resolve('accelerate')
        l_0_venv = resolve('venv')
        l_0_uv = resolve('uv')
        l_0_pins = resolve('pins')
        l_0_constraints = resolve('constraints')
        l_0_torch_stage = resolve('torch_stage')
        l_0_target = resolve('target')
        l_0_locked = resolve('locked')
        l_0_python = resolve('python')
        l_0_extras = resolve('extras')
        l_0_keep_base = resolve('keep_base')
        l_0_indexes = resolve('indexes')
        l_0_arch_want = resolve('arch_want')
        l_0_arch_want_arm64 = resolve('arch_want_arm64')
        l_0_arch_file = resolve('arch_file')
        l_0_require_cuda = resolve('require_cuda')
        l_0_run_flags = resolve('run_flags')
        l_0_expect = resolve('expect')
        l_0_python_flag = resolve('python_flag')
        l_0_image = resolve('image')
        l_0_version_tag = resolve('version_tag')
        l_0_requires = resolve('requires')
        l_0_secrets = l_0_apt_install = l_0_python_check = l_0_uv_run = l_0_apt_all = missing
        try:
            t_1 = environment.filters['join']
        except KeyError:
            @internalcode
            def t_1(*unused):
                raise TemplateRuntimeError("No filter named 'join' found.")
        try:
            t_2 = environment.tests['defined']
        except KeyError:
            @internalcode
            def t_2(*unused):
                raise TemplateRuntimeError("No test named 'defined' found.")
        pass
        def macro():
            t_3 = []
            pass
            t_3.append(
                '    --mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle \\\n    --mount=type=secret,id=netrc,target=/run/secrets/netrc \\\n    --mount=type=bind,source=wheelhouse,target=/run/wheelhouse \\',
            )
            return concat(t_3)
        context.exported_vars.add('secrets')
        context.vars['secrets'] = l_0_secrets = Macro(environment, macro, 'secrets', (), False, False, False, context.eval_ctx.autoescape)
        def macro(l_1_packages):
            t_4 = []
            if l_1_packages is missing:
                l_1_packages = undefined("parameter 'packages' was not provided", name='packages')
            pass
            t_4.extend((
                'RUN --mount=type=cache,target=/var/cache/apt,id=envbuild-apt-cache,sharing=locked \\\n    --mount=type=cache,target=/var/lib/apt/lists,id=envbuild-apt-lists,sharing=locked \\\n    apt-get update \\\n    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ',
                str(t_1(context.eval_ctx, l_1_packages, ' ')),
            ))
            return concat(t_4)
        context.exported_vars.add('apt_install')
        context.vars['apt_install'] = l_0_apt_install = Macro(environment, macro, 'apt_install', ('packages',), False, False, False, context.eval_ctx.autoescape)
        def macro():
            t_5 = []
            pass
            if environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'version'):
                pass
                t_5.extend((
                    str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable')),
                    ' -c "import sys; v = \'%d.%d\' % sys.version_info[:2]; sys.exit(0 if v == \'',
                    str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'version')),
                    "' else 'the base image runs Python ' + v + '; the matrix declares ",
                    str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'version')),
                    ' (backends.',
                    str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name')),
                    '.python.version)\')" \\\n    && ',
                ))
            return concat(t_5)
        context.exported_vars.add('python_check')
        context.vars['python_check'] = l_0_python_check = Macro(environment, macro, 'python_check', (), False, False, False, context.eval_ctx.autoescape)
        def macro(l_1_extra_mount):
            t_6 = []
            if l_1_extra_mount is missing:
                l_1_extra_mount = ''
            pass
            t_6.extend((
                'RUN --mount=type=cache,target=/root/.cache/uv,id=envbuild-uv-',
                str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name')),
                ',sharing=locked \\\n    --mount=type=bind,from=uv,source=/opt/uv/bin,target=/run/uv \\\n    --mount=type=bind,source=uv-step.sh,target=/run/uv-step.sh \\\n    --mount=type=secret,id=fresh_cache,target=/run/secrets/fresh_cache \\\n',
            ))
            if l_1_extra_mount:
                pass
                t_6.extend((
                    '    ',
                    str(l_1_extra_mount),
                    ' \\\n',
                ))
            t_6.extend((
                str(context.call((undefined(name='secrets') if l_0_secrets is missing else l_0_secrets))),
                '\n    . /run/uv-step.sh \\',
            ))
            return concat(t_6)
        context.exported_vars.add('uv_run')
        context.vars['uv_run'] = l_0_uv_run = Macro(environment, macro, 'uv_run', ('extra_mount',), False, False, False, context.eval_ctx.autoescape)
        yield '# Generated by envbuild from '
        yield str((undefined(name='matrix_name') if l_0_matrix_name is missing else l_0_matrix_name))
        yield ' (backend: '
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
        yield '). Do not edit by hand:\n# change the matrix or envbuild/render/templates/, then run `envbuild render`.\n# '
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'description'))
        yield ': device "'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'device'))
        yield '", torch '
        yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'torch'), 'version'))
        if environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'):
            pass
            yield ', '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'package'))
            yield ' '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'version'))
        yield ', transformers '
        yield str((undefined(name='transformers') if l_0_transformers is missing else l_0_transformers))
        yield ', accelerate '
        yield str((undefined(name='accelerate') if l_0_accelerate is missing else l_0_accelerate))
        yield '.\n# Build with `envbuild build --backend '
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
        yield '`: it supplies the context (probe, lock, wheelhouse) and the secrets.\n\n# Names the uv and pip caches (folders in BuildKit cache mounts); another value starts from empty ones.\nARG ENVBUILD_CACHE_ID=envbuild\n'
        if context.call(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'base_image'), 'endswith'), ':latest'):
            pass
            yield '# The vendor publishes one tag per release path; the release is pinned in the path itself.\n# hadolint ignore=DL3007\n'
        yield 'FROM '
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'base_image'))
        yield ' AS system\n\n'
        if (undefined(name='venv') if l_0_venv is missing else l_0_venv):
            pass
            yield 'ENV VIRTUAL_ENV='
            yield str((undefined(name='venv') if l_0_venv is missing else l_0_venv))
            yield ' \\\n    PATH='
            yield str((undefined(name='venv') if l_0_venv is missing else l_0_venv))
            yield '/bin:/opt/envbuild/bin:$PATH \\\n'
        else:
            pass
            yield 'ENV PATH=/opt/envbuild/bin:$PATH \\\n'
        yield '    PIP_DISABLE_PIP_VERSION_CHECK=1 \\\n    PIP_ROOT_USER_ACTION=ignore \\\n    PYTHONUNBUFFERED=1\n\n\n'
        l_0_apt_all = ((environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'apt') + environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'apt')) + environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'compile'), 'apt'))
        context.vars['apt_all'] = l_0_apt_all
        context.exported_vars.add('apt_all')
        if (undefined(name='apt_all') if l_0_apt_all is missing else l_0_apt_all):
            pass
            if environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'apt'):
                pass
                yield '# The base carries no Python of its own: take it from the distribution'
                if environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'apt'):
                    pass
                    yield ", with what the backend's\n# runtime asks for"
                yield '.\n'
            else:
                pass
                yield "# What the backend's runtime asks for, from the distribution.\n"
            if environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'compile'), 'apt'):
                pass
                yield "# With what torch.compile needs at run time, a compiler and Python's headers: one layer, one `apt-get update`\n# (a layer of their own cost a cold build seconds).\n"
            yield '# Lists and debs stay in cache mounts.\n# hadolint ignore=DL3008\n'
            yield str(context.call((undefined(name='apt_install') if l_0_apt_install is missing else l_0_apt_install), (undefined(name='apt_all') if l_0_apt_all is missing else l_0_apt_all)))
            yield '\n\n'
        if environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'env'):
            pass
            yield "# The backend's own environment (after the packages it may name are installed).\nENV "
            l_1_loop = missing
            for (l_1_key, l_1_value), l_1_loop in LoopContext(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'env'), undefined):
                _loop_vars = {}
                pass
                yield str(l_1_key)
                yield '="'
                yield str(l_1_value)
                yield '"'
                if (not environment.getattr(l_1_loop, 'last')):
                    pass
                    yield ' \\\n'
            l_1_loop = l_1_key = l_1_value = missing
            yield '\n\n'
        yield "# The installer: uv, fetched with the system's own pip"
        if (undefined(name='venv') if l_0_venv is missing else l_0_venv):
            pass
            yield " (or the pip wheel Debian's python3-venv brings, or\n# else a throwaway venv's)"
        yield ' into a stage of its own, so that install steps bind-mount it and no layer of the\n# image carries it. The stage starts from the system, not from the environment below: it runs while that is set up.\n# A wheel folder holding uv '
        yield str((undefined(name='uv') if l_0_uv is missing else l_0_uv))
        yield ' serves it alone: no index is asked, so a dead one costs nothing.\nFROM system AS uv\nARG ENVBUILD_CACHE_ID\nRUN --mount=type=cache,target=/root/.cache/pip,id=envbuild-pip,sharing=locked \\\n'
        yield str(context.call((undefined(name='secrets') if l_0_secrets is missing else l_0_secrets)))
        yield '\n    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle SSL_CERT_FILE=/run/secrets/ca_bundle; fi \\\n    && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi'
        if (not (undefined(name='venv') if l_0_venv is missing else l_0_venv)):
            pass
            yield ' \\\n    && export PIP_BREAK_SYSTEM_PACKAGES=1'
        yield ' \\\n    && export PIP_CACHE_DIR="/root/.cache/pip/${ENVBUILD_CACHE_ID:-envbuild}" \\\n    && for f in /run/wheelhouse/uv-'
        yield str((undefined(name='uv') if l_0_uv is missing else l_0_uv))
        yield '-*.whl; do if [ -f "$f" ]; then export PIP_NO_INDEX=1; fi; break; done \\\n'
        if (undefined(name='venv') if l_0_venv is missing else l_0_venv):
            pass
            yield '    && if '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable'))
            yield ' -m pip --version >/dev/null 2>&1; then set -- '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable'))
            yield ' -m pip; \\\n        elif set -- /usr/share/python-wheels/pip-*.whl; [ -f "$1" ]; then set -- '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable'))
            yield ' "$1/pip"; \\\n        else '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable'))
            yield ' -m venv /tmp/pip && set -- /tmp/pip/bin/pip; fi \\\n    && "$@" install --find-links /run/wheelhouse --target /opt/uv "uv=='
            yield str((undefined(name='uv') if l_0_uv is missing else l_0_uv))
            yield '"\n'
        else:
            pass
            yield '    && '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable'))
            yield ' -m pip install --find-links /run/wheelhouse --target /opt/uv "uv=='
            yield str((undefined(name='uv') if l_0_uv is missing else l_0_uv))
            yield '"\n'
        yield '\nFROM system AS base\n'
        if environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'version'):
            pass
            yield "# The pins' Requires-Python were checked against Python "
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'version'))
            yield " (the matrix's python.version): a base that\n# runs another fails here, in the build and in the lock, not in a user's container.\n"
        if (environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'torch'), 'source') == 'base'):
            pass
            yield '# The base image carries torch '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'torch'), 'version'))
            if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin') and (environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'source') == 'base')):
                pass
                yield ' and '
                yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'package'))
            yield ': install into its Python environment,\n# with constraints that keep the installer from ever replacing what the vendor built.\n'
        if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'user') != 'root'):
            pass
            yield "# A named user that is not root, with a home; home, the cache root and the work folder belong to group 0 and\n# are group-writable, so any user id with group 0 (as OpenShift runs images) works there too.\n# Its uid is 1000 (a base's own user 1000, such as Ubuntu's `ubuntu`, becomes it), so USER can be numeric:\n# Kubernetes' runAsNonRoot cannot verify a user by name.\n"
        yield 'RUN '
        yield str(context.call((undefined(name='python_check') if l_0_python_check is missing else l_0_python_check)))
        if (undefined(name='venv') if l_0_venv is missing else l_0_venv):
            pass
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'python'), 'executable'))
            yield ' -m venv '
            yield str((undefined(name='venv') if l_0_venv is missing else l_0_venv))
            yield ' \\\n    && '
        yield "mkdir -p /opt/envbuild \\\n    && printf '%s\\n' "
        for (l_1_dist, l_1_version) in (undefined(name='pins') if l_0_pins is missing else l_0_pins):
            _loop_vars = {}
            pass
            yield "'"
            yield str(l_1_dist)
            yield '=='
            yield str(l_1_version)
            yield "' "
        l_1_dist = l_1_version = missing
        yield '> '
        yield str((undefined(name='constraints') if l_0_constraints is missing else l_0_constraints))
        if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'user') != 'root'):
            pass
            yield ' \\\n    && if getent passwd 1000 >/dev/null; then \\\n        usermod -l envbuild -g 0 -d /home/envbuild -m "$(id -nu 1000)"; \\\n    else \\\n        useradd -l --uid 1000 --gid 0 --create-home --home-dir /home/envbuild --shell /bin/sh envbuild; \\\n    fi \\\n    && mkdir -p /cache /workspace /home/envbuild \\\n    && chgrp -R 0 /home/envbuild /cache /workspace \\\n    && chmod -R g=u /home/envbuild /cache /workspace'
        yield '\n'
        if ((undefined(name='torch_stage') if l_0_torch_stage is missing else l_0_torch_stage) == 'torch'):
            pass
            yield '\n# torch'
            if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin') and (environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'source') == 'pip')):
                pass
                yield ', '
                yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'package'))
            yield ' and what they need, exactly as locked (locks/'
            yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
            yield ".txt, layer torch): the largest\n# layer and the one that changes least. Every install step takes exactly the files its layer's pylock.toml names,\n# by URL (or the wheel folder's file of the same name and hash), checked by hash: it asks no index about any name.\n# Bytecode is compiled here, once, rather than in every container\n# (envbuild_compile in uv-step.sh: what the layer installed, not the test suites that wheels carry).\n# Not through the uv cache: unpacking a gigabyte into the cache mount and copying it out again cost a cold build\n# seconds (the cache is another filesystem), and this layer's own cache is BuildKit's layer cache; unpacked\n# beside the environment instead, the files are linked into it.\nFROM base AS torch\nARG ENVBUILD_CACHE_ID\n"
            yield str(context.call((undefined(name='uv_run') if l_0_uv_run is missing else l_0_uv_run), '--mount=type=bind,source=lock/pylock.torch.toml,target=/run/layer/pylock.toml'))
            yield '\n    && UV_LINK_MODE=hardlink /run/uv/uv pip install '
            yield str((undefined(name='target') if l_0_target is missing else l_0_target))
            yield ' '
            yield str((undefined(name='locked') if l_0_locked is missing else l_0_locked))
            yield ' --no-cache -r /run/layer/pylock.toml \\\n    && envbuild_compile '
            yield str((undefined(name='python') if l_0_python is missing else l_0_python))
            yield '\n'
        yield '\n# The lock: what installing torch'
        if environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'):
            pass
            yield ', '
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'package'))
        yield ', transformers, accelerate'
        if (undefined(name='extras') if l_0_extras is missing else l_0_extras):
            pass
            yield ' and the extras'
        yield ' adds to this base, resolved\n# here by pip. `envbuild lock` builds this target alone (its result is locks/'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
        yield '.txt); an image build\n# never resolves.\nFROM base AS lock-resolve\nARG ENVBUILD_CACHE_ID\nARG ENVBUILD_LOCK_RUN\nRUN --mount=type=cache,target=/root/.cache/pip,id=envbuild-pip,sharing=locked \\\n    --mount=type=bind,source=lock,target=/run/lock \\\n'
        yield str(context.call((undefined(name='secrets') if l_0_secrets is missing else l_0_secrets)))
        yield '\n    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle SSL_CERT_FILE=/run/secrets/ca_bundle; fi \\\n    && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi'
        if (not (undefined(name='venv') if l_0_venv is missing else l_0_venv)):
            pass
            yield ' \\\n    && export PIP_BREAK_SYSTEM_PACKAGES=1'
        yield ' \\\n    && export PIP_CACHE_DIR="/root/.cache/pip/${ENVBUILD_CACHE_ID:-envbuild}" \\\n    && echo "resolution ${ENVBUILD_LOCK_RUN}" \\\n    && '
        yield str((undefined(name='python') if l_0_python is missing else l_0_python))
        yield ' /run/lock/resolve.py --out /out --requirements /run/lock/requirements.in \\\n        --previous /run/lock/previous.txt --upgrade /run/lock/upgrade.txt'
        if (undefined(name='keep_base') if l_0_keep_base is missing else l_0_keep_base):
            pass
            yield ' --keep-base'
        yield ' \\\n        -- '
        yield str((undefined(name='indexes') if l_0_indexes is missing else l_0_indexes))
        yield ' --find-links /run/wheelhouse\n\nFROM scratch AS lock\nCOPY --from=lock-resolve /out/ /\n\nFROM '
        yield str((undefined(name='torch_stage') if l_0_torch_stage is missing else l_0_torch_stage))
        yield ' AS deps\nARG ENVBUILD_CACHE_ID\n# The dependencies of transformers and accelerate, exactly as locked (layer deps); they change less often\n# than either.\n'
        yield str(context.call((undefined(name='uv_run') if l_0_uv_run is missing else l_0_uv_run), '--mount=type=bind,source=lock/pylock.deps.toml,target=/run/layer/pylock.toml'))
        yield '\n    && if [ -s /run/layer/pylock.toml ]; then /run/uv/uv pip install '
        yield str((undefined(name='target') if l_0_target is missing else l_0_target))
        yield ' '
        yield str((undefined(name='locked') if l_0_locked is missing else l_0_locked))
        yield ' -r /run/layer/pylock.toml \\\n        && envbuild_compile '
        yield str((undefined(name='python') if l_0_python is missing else l_0_python))
        yield "; fi\n\n# Then torch must still import: the build fails, not the user, when a dependency broke it (without the device\n# plugins torch would load by itself: their drivers come with the device, at run time). The same import records\n# the device architectures torch was compiled for (no device needed), which smoke and run compare with the\n# host's; a list the matrix declares (the image's label) must be exactly it. A stage of its own, so that it runs\n# beside the steps below; its record joins the image at the end.\nFROM deps AS torch-check\n"
        if (((((undefined(name='arch_want') if l_0_arch_want is missing else l_0_arch_want) != (undefined(name='arch_want_arm64') if l_0_arch_want_arm64 is missing else l_0_arch_want_arm64)) and environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'host')) and t_2(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'host'), 'arch_arm64'))) and ('linux/arm64' in environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'platforms'))):
            pass
            yield "# linux/arm64's torch carries another list (host.arch_arm64"
            if (not (undefined(name='arch_want_arm64') if l_0_arch_want_arm64 is missing else l_0_arch_want_arm64)):
                pass
                yield ', not declared: recorded only'
            yield ').\nARG TARGETARCH\nRUN TORCH_DEVICE_BACKEND_AUTOLOAD=0 '
            yield str((undefined(name='python') if l_0_python is missing else l_0_python))
            yield ' -c "import os, sys, torch; f = getattr(torch._C, \'_cuda_getArchFlags\', None) or getattr(torch._C, \'_xpu_getArchFlags\', None); got = sorted(set((f() or \'\').split())) if f else []; arm = os.environ.get(\'TARGETARCH\') == \'arm64\'; want = sorted((\''
            yield str((undefined(name='arch_want_arm64') if l_0_arch_want_arm64 is missing else l_0_arch_want_arm64))
            yield "' if arm else '"
            yield str((undefined(name='arch_want') if l_0_arch_want is missing else l_0_arch_want))
            yield '\').split()); print(\' \'.join(got)); sys.exit(0 if not want or got == want else \'torch was built for \' + (\' \'.join(got) or \'no device architecture\') + \'; the matrix declares host.\' + (\'arch_arm64 \' if arm else \'arch \') + \' \'.join(want))" > '
            yield str((undefined(name='arch_file') if l_0_arch_file is missing else l_0_arch_file))
            yield '\n'
        else:
            pass
            yield 'RUN TORCH_DEVICE_BACKEND_AUTOLOAD=0 '
            yield str((undefined(name='python') if l_0_python is missing else l_0_python))
            yield ' -c "import sys, torch; f = getattr(torch._C, \'_cuda_getArchFlags\', None) or getattr(torch._C, \'_xpu_getArchFlags\', None); got = sorted(set((f() or \'\').split())) if f else []; want = sorted(\''
            yield str((undefined(name='arch_want') if l_0_arch_want is missing else l_0_arch_want))
            yield '\'.split()); print(\' \'.join(got)); sys.exit(0 if not want or got == want else \'torch was built for \' + (\' \'.join(got) or \'no device architecture\') + \'; the matrix declares host.arch \' + \' \'.join(want))" > '
            yield str((undefined(name='arch_file') if l_0_arch_file is missing else l_0_arch_file))
            yield '\n'
        yield '\nFROM deps\nARG ENVBUILD_CACHE_ID\n'
        if (undefined(name='extras') if l_0_extras is missing else l_0_extras):
            pass
            yield "\n# The matrix's extra packages for this image (layer extras): "
            yield str(t_1(context.eval_ctx, (undefined(name='extras') if l_0_extras is missing else l_0_extras), ', '))
            yield '.\n'
            yield str(context.call((undefined(name='uv_run') if l_0_uv_run is missing else l_0_uv_run), '--mount=type=bind,source=lock/pylock.extras.toml,target=/run/layer/pylock.toml'))
            yield '\n    && /run/uv/uv pip install '
            yield str((undefined(name='target') if l_0_target is missing else l_0_target))
            yield ' '
            yield str((undefined(name='locked') if l_0_locked is missing else l_0_locked))
            yield ' -r /run/layer/pylock.toml \\\n    && envbuild_compile '
            yield str((undefined(name='python') if l_0_python is missing else l_0_python))
            yield '\n'
        yield '\n# The probe lets any copy of this image test itself: `docker run ... IMAGE envbuild-probe`.\nCOPY probe.py /opt/envbuild/probe.py\n'
        if (undefined(name='require_cuda') if l_0_require_cuda is missing else l_0_require_cuda):
            pass
            yield '# The nvidia/cuda base says NVIDIA_REQUIRE_CUDA=cuda>='
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'host'), 'version'))
            yield ', and the NVIDIA Container Toolkit refuses an older\n# driver at start; under minor version compatibility every driver of the '
            yield str(environment.getitem(context.call(environment.getattr(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'host'), 'version'), 'split'), '.'), 0))
            yield '.x floor runs this build\n# (envbuild/matrix/stacks/cuda.py): the image declares that floor instead.\nENV NVIDIA_REQUIRE_CUDA="'
            yield str((undefined(name='require_cuda') if l_0_require_cuda is missing else l_0_require_cuda))
            yield '"\n'
        yield 'ENV ENVBUILD_BACKEND="'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
        yield '" \\\n    ENVBUILD_DEVICE="'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'device'))
        yield '" \\\n    ENVBUILD_PLUGIN_IMPORT="'
        yield str((environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'import_module') or ''))
        yield '" \\\n    ENVBUILD_PLUGIN_NEEDS="'
        yield str((environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'needs') if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin') and environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'needs')) else ''))
        yield '" \\\n    ENVBUILD_AVAILABILITY="'
        yield str((environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'availability') or ''))
        yield '" \\\n    ENVBUILD_RUN_FLAGS="'
        yield str((undefined(name='run_flags') if l_0_run_flags is missing else l_0_run_flags))
        yield '" \\\n    ENVBUILD_COMPILE="'
        yield str(('1' if environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'compile'), 'check') else ''))
        yield '" \\\n    ENVBUILD_LOCK=/opt/envbuild/lock.txt \\\n    PIP_CONSTRAINT='
        yield str((undefined(name='constraints') if l_0_constraints is missing else l_0_constraints))
        yield ' \\\n    UV_CONSTRAINT='
        yield str((undefined(name='constraints') if l_0_constraints is missing else l_0_constraints))
        yield ' \\\n    ENVBUILD_EXPECT="'
        l_1_loop = missing
        for (l_1_dist, l_1_version), l_1_loop in LoopContext((undefined(name='expect') if l_0_expect is missing else l_0_expect), undefined):
            _loop_vars = {}
            pass
            yield str(l_1_dist)
            yield '='
            yield str(l_1_version)
            if (not environment.getattr(l_1_loop, 'last')):
                pass
                yield ' '
        l_1_loop = l_1_dist = l_1_version = missing
        yield '"\n\n# transformers and accelerate last (layer top), with the lock beside them: a bump of either rebuilds only\n# these small layers. Their bytecode is not compiled: that would cost seconds on every bump and about 60 MB,\n# for about half a second saved when a container first imports them. The build fails, not the user, when\n# a locked version did not land (e.g. a vendor torch replaced by the installer).\nCOPY lock/lock.txt /opt/envbuild/lock.txt\n'
        if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'user') != 'root'):
            pass
            yield '# Where /cache cannot be written (a read-only image run as any uid:gid, as Apptainer and clusters run it), the\n# entrypoint moves the caches to a folder this user can write and says so once (render/scripts/entrypoint.sh).\nCOPY entrypoint.sh /opt/envbuild/bin/envbuild-entrypoint\n'
        yield str(context.call((undefined(name='uv_run') if l_0_uv_run is missing else l_0_uv_run), '--mount=type=bind,source=lock/pylock.top.toml,target=/run/layer/pylock.toml'))
        yield "\n    && UV_CONSTRAINT='' /run/uv/uv pip install "
        yield str((undefined(name='target') if l_0_target is missing else l_0_target))
        yield ' '
        yield str((undefined(name='locked') if l_0_locked is missing else l_0_locked))
        yield ' -r /run/layer/pylock.toml \\\n'
        if (undefined(name='venv') if l_0_venv is missing else l_0_venv):
            pass
            yield '    && /run/uv/uv pip check '
            yield str((undefined(name='python_flag') if l_0_python_flag is missing else l_0_python_flag))
            yield ' \\\n'
        yield '    && /run/uv/uv pip list '
        yield str((undefined(name='python_flag') if l_0_python_flag is missing else l_0_python_flag))
        yield ' --format json > /opt/envbuild/installed.json \\\n    && mkdir -p /opt/envbuild/bin \\\n    && printf \'#!/bin/sh\\nexec %s /opt/envbuild/probe.py "$@"\\n\' '
        yield str((undefined(name='python') if l_0_python is missing else l_0_python))
        yield ' > /opt/envbuild/bin/envbuild-probe \\\n    && chmod 755 /opt/envbuild/bin/envbuild-probe \\\n    && envbuild-probe --pins-only\nCOPY --from=torch-check '
        yield str((undefined(name='arch_file') if l_0_arch_file is missing else l_0_arch_file))
        yield ' '
        yield str((undefined(name='arch_file') if l_0_arch_file is missing else l_0_arch_file))
        yield "\n\n# One cache root for people: Hugging Face downloads, Inductor's and Triton's compiled kernels and other\n# per-user caches; one volume there keeps them between runs (`envbuild run --cache`). Set after the build's\n# last step, so no build step ever writes into it.\n"
        if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'user') != 'root'):
            pass
            yield 'ENV HOME=/home/envbuild \\\n    USER=envbuild \\\n    XDG_CACHE_HOME=/cache \\\n'
        else:
            pass
            yield 'ENV XDG_CACHE_HOME=/cache \\\n'
        yield '    HF_HOME=/cache/huggingface \\\n    TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor \\\n    TRITON_CACHE_DIR=/cache/triton\n'
        if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'user') == 'root'):
            pass
            yield 'RUN mkdir -p /cache /workspace\n'
        yield 'VOLUME /cache\nWORKDIR /workspace\n'
        if (environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'user') != 'root'):
            pass
            yield 'USER 1000:0\nENTRYPOINT ["/opt/envbuild/bin/envbuild-entrypoint"]\n'
        yield '\nLABEL org.opencontainers.image.title="envbuild-'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
        yield '" \\\n      org.opencontainers.image.description="'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'description'))
        yield ': PyTorch '
        yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'torch'), 'version'))
        yield ' and Transformers '
        yield str((undefined(name='transformers') if l_0_transformers is missing else l_0_transformers))
        yield '" \\\n      org.opencontainers.image.source="'
        yield str(environment.getattr((undefined(name='image') if l_0_image is missing else l_0_image), 'source'))
        yield '" \\\n      org.opencontainers.image.licenses="'
        yield str(environment.getattr((undefined(name='image') if l_0_image is missing else l_0_image), 'licenses'))
        yield '" \\\n      org.opencontainers.image.vendor="'
        yield str(environment.getattr((undefined(name='image') if l_0_image is missing else l_0_image), 'vendor'))
        yield '" \\\n      org.opencontainers.image.version="'
        yield str((undefined(name='version_tag') if l_0_version_tag is missing else l_0_version_tag))
        yield '" \\\n      org.opencontainers.image.base.name="'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'base_image'))
        yield '" \\\n      dev.envbuild.backend="'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'name'))
        yield '" \\\n      dev.envbuild.device="'
        yield str(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'device'))
        yield '" \\\n      dev.envbuild.torch="'
        yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'torch'), 'version'))
        yield '" \\\n      dev.envbuild.plugin="'
        if environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'):
            pass
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'package'))
            yield '=='
            yield str(environment.getattr(environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'plugin'), 'version'))
        yield '" \\\n      dev.envbuild.transformers="'
        yield str((undefined(name='transformers') if l_0_transformers is missing else l_0_transformers))
        yield '" \\\n      dev.envbuild.accelerate="'
        yield str((undefined(name='accelerate') if l_0_accelerate is missing else l_0_accelerate))
        yield '" \\\n      dev.envbuild.requires.driver="'
        yield str(environment.getattr((undefined(name='requires') if l_0_requires is missing else l_0_requires), 'driver_label'))
        yield '" \\\n      dev.envbuild.requires.stack="'
        yield str(environment.getattr((undefined(name='requires') if l_0_requires is missing else l_0_requires), 'stack_label'))
        yield '" \\\n      dev.envbuild.requires.arch="'
        yield str(context.call(environment.getattr((undefined(name='requires') if l_0_requires is missing else l_0_requires), 'arch_label'), environment.getattr((undefined(name='b') if l_0_b is missing else l_0_b), 'device')))
        yield '"\n'

    blocks = {}
    debug_info = '2=49&7=58&11=65&13=70&14=73&15=76&18=88&25=95&29=98&30=102&32=106&35=113&37=117&38=122&39=133&43=135&47=139&49=141&50=144&51=146&60=152&61=155&62=157&63=160&68=167&74=171&77=173&79=177&84=190&87=194&91=196&93=198&96=202&97=204&98=207&99=211&100=213&101=215&103=220&107=225&108=228&111=230&112=233&115=239&121=243&123=251&133=266&135=269&145=276&146=278&147=282&150=285&151=294&158=296&160=298&164=302&165=304&166=308&171=310&175=312&176=314&177=318&187=320&188=323&190=327&192=338&197=345&199=348&200=350&201=352&202=356&207=359&208=362&209=364&211=366&213=369&214=371&215=373&216=375&217=377&218=379&219=381&221=383&222=385&223=388&230=399&236=402&237=404&239=408&240=411&242=414&244=416&247=418&252=422&262=429&267=433&272=437&273=439&274=445&275=447&276=449&277=451&278=453&279=455&280=457&281=459&282=461&283=467&284=469&285=471&286=473&287=475'
    return locals()
