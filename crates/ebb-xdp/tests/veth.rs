//! The device on a real veth pair, with Linux in a namespace on the other end: frames
//! answered by hand through the byte-slice API (ARP and ICMP echo), so these tests need
//! no stack. Root, `ip` and `ethtool`, or SKIPPED.

use std::time::{Duration, Instant};

use ebb_testkit::veth::{VethPair, need_veth};
use ebb_xdp::{XdpConfig, XdpDevice, XdpError};

const OUR_MAC: [u8; 6] = [0x02, 0xeb, 0xb0, 0, 0, 1];
const OUR_IP: [u8; 4] = [10, 77, 0, 2];

/// The reply to an ARP request for `OUR_IP` or an ICMP echo request to it, if `frame`
/// is one.
fn answer(frame: &[u8]) -> Option<Vec<u8>> {
    if frame.len() < 42 {
        return None;
    }
    let ethertype = [frame[12], frame[13]];
    let mut reply = frame.to_vec();
    reply[0..6].copy_from_slice(&frame[6..12]);
    reply[6..12].copy_from_slice(&OUR_MAC);
    if ethertype == [0x08, 0x06] && frame[21] == 1 && frame[38..42] == OUR_IP {
        reply[21] = 2; // reply
        reply[22..28].copy_from_slice(&OUR_MAC);
        reply[28..32].copy_from_slice(&OUR_IP);
        reply[32..42].copy_from_slice(&frame[22..32]);
        return Some(reply);
    }
    let header = usize::from(frame[14] & 0x0f) * 4;
    if ethertype == [0x08, 0x00] && frame[23] == 1 && frame[30..34] == OUR_IP {
        let icmp = 14 + header;
        if reply.len() < icmp + 8 || frame[icmp] != 8 {
            return None;
        }
        reply[26..30].copy_from_slice(&frame[30..34]);
        reply[30..34].copy_from_slice(&frame[26..30]);
        reply[icmp] = 0; // echo reply
        // Type 8 → 0: the ones' complement sum drops 0x0800, so the checksum rises by it.
        let sum = u32::from(u16::from_be_bytes([frame[icmp + 2], frame[icmp + 3]])) + 0x0800;
        let sum = (sum & 0xffff) + (sum >> 16);
        reply[icmp + 2..icmp + 4].copy_from_slice(&(sum as u16).to_be_bytes());
        return Some(reply);
    }
    None
}

#[test]
fn answers_ping_from_linux_through_the_byte_slice_api() {
    let test = "ebb-xdp::answers_ping_from_linux_through_the_byte_slice_api";
    if need_veth(test, &["ping"]).is_none() {
        return;
    }
    let veth = VethPair::create(test, "xp", "10.77.0.1/24");
    let opening = Instant::now();
    let mut device = XdpDevice::open(&XdpConfig::new(veth.device.clone()))
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    // Most of it is aya reading the kernel's BTF (/sys/kernel/btf/vmlinux).
    println!("{test}: opened in {:?}", opening.elapsed());
    let mut ping = veth
        .ns
        .exec(&["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.77.0.2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run ping");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answered = 0;
    let status = loop {
        let mut replies = Vec::new();
        device.receive_with(64, |frame| replies.extend(answer(frame)));
        for reply in &replies {
            assert!(
                device
                    .transmit_gather(&[&reply[..14], &reply[14..]])
                    .unwrap()
            );
            answered += 1;
        }
        device.flush();
        if let Some(status) = ping.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{test}: ping did not finish");
        std::thread::sleep(Duration::from_millis(1));
    };
    let out = ping.wait_with_output().unwrap();
    let stats = device.stats();
    assert!(
        status.success(),
        "{test}: ping failed ({answered} answered, {stats:?}): {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(answered >= 6, "ARP and five echoes: {answered}");
    assert_eq!(stats.bad_descriptors, 0);
    assert!(stats.native, "veth runs XDP in driver mode");
}

/// The probe kept apart from the device sees a frame arrive, stops seeing it once the
/// device took it, and stays safe to ask after the device is gone.
#[test]
fn the_rx_probe_sees_arrivals_without_the_device() {
    let test = "ebb-xdp::the_rx_probe_sees_arrivals_without_the_device";
    if need_veth(test, &["ping"]).is_none() {
        return;
    }
    let veth = VethPair::create(test, "xq", "10.77.0.1/24");
    let mut device = XdpDevice::open(&XdpConfig::new(veth.device.clone()))
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let probe = device.rx_probe();
    assert!(!probe.has_received(), "nothing sent yet");
    // One ARP request for our address (no answer: ping gives up after a second).
    let mut ping = veth
        .ns
        .exec(&["ping", "-c", "1", "-W", "1", "10.77.0.2"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run ping");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !probe.has_received() {
        assert!(
            Instant::now() < deadline,
            "{test}: the probe never saw a frame"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(device.has_received(), "the device agrees with its probe");
    let mut frames = 0;
    device.receive_with(64, |_| frames += 1);
    assert!(frames >= 1);
    assert!(!probe.has_received(), "taken frames are not reported again");
    let _ = ping.wait();
    drop(device);
    let _ = probe.has_received(); // the mapping outlives the socket
}

#[test]
fn transmit_with_fills_a_chunk_and_back_pressure_is_reported() {
    let test = "ebb-xdp::transmit_with_fills_a_chunk_and_back_pressure_is_reported";
    if need_veth(test, &[]).is_none() {
        return;
    }
    let veth = VethPair::create(test, "xq", "10.78.0.1/24");
    let mut config = XdpConfig::new(veth.device.clone());
    config.chunks = 16; // 8 transmit chunks
    let mut device = XdpDevice::open(&config).unwrap_or_else(|e| panic!("{test}: {e}"));
    let frame = [0xffu8; 60];
    let mut queued = 0;
    // Without a flush nothing is sent: the ninth frame finds no chunk.
    while device
        .transmit_with(60, |chunk| {
            chunk.copy_from_slice(&frame);
            true
        })
        .unwrap()
    {
        queued += 1;
        assert!(queued <= 8);
    }
    assert_eq!(queued, 8);
    // Abandoned by the closure: the chunk stays free (no frame queued).
    device.flush();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if device.transmit_with(60, |_| false).is_ok() && device.transmit_gather(&[&frame]).unwrap()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{test}: completions never came back"
        );
        device.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    let too_long = vec![0u8; device.max_frame_len() + 1];
    assert!(matches!(
        device.transmit_gather(&[&too_long]),
        Err(XdpError::FrameTooLong { .. })
    ));
}

#[test]
fn a_second_device_on_the_interface_is_refused_clearly() {
    let test = "ebb-xdp::a_second_device_on_the_interface_is_refused_clearly";
    if need_veth(test, &[]).is_none() {
        return;
    }
    let veth = VethPair::create(test, "xr", "10.79.0.1/24");
    let config = XdpConfig::new(veth.device.clone());
    let _first = XdpDevice::open(&config).unwrap_or_else(|e| panic!("{test}: {e}"));
    let err = XdpDevice::open(&config).unwrap_err();
    eprintln!("{test}: {err}");
    assert!(matches!(err, XdpError::QueueBusy { queue: 0, .. }), "{err}");
    assert!(err.to_string().contains(&veth.device), "{err}");
}

#[test]
fn a_multi_queue_interface_is_refused_with_the_reason() {
    let test = "ebb-xdp::a_multi_queue_interface_is_refused_with_the_reason";
    if need_veth(test, &[]).is_none() {
        return;
    }
    let name = ebb_testkit::netns::unique_name("xm");
    ebb_testkit::netns::ip(&[
        "link",
        "add",
        &name,
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        &format!("{name}p"),
    ]);
    let err = XdpDevice::open(&XdpConfig::new(name.clone())).unwrap_err();
    ebb_testkit::netns::ip(&["link", "del", &name]);
    assert!(
        matches!(err, XdpError::MultiQueue { queues: 4, .. }),
        "{err}"
    );
}

/// Without CAP_NET_ADMIN / CAP_BPF the error says what is missing. Run as root, the test
/// makes a veth and runs itself again as `nobody` (`setpriv`) on it; run as a user, it
/// tries the first interface that is not a loopback.
#[test]
fn without_privilege_the_error_names_the_capabilities() {
    let test = "ebb-xdp::without_privilege_the_error_names_the_capabilities";
    let child = std::env::var("EBB_XDP_UNPRIVILEGED_CHILD").ok();
    if child.is_some() || !ebb_testkit::is_root() {
        let interface = child.or_else(|| {
            std::fs::read_dir("/sys/class/net")
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|name| name != "lo")
        });
        let Some(interface) = interface else {
            ebb_testkit::skip::<()>(test, ebb_testkit::Capability::Root, "no interface but lo");
            return;
        };
        let err = XdpDevice::open(&XdpConfig::new(interface)).unwrap_err();
        assert!(matches!(err, XdpError::NeedsPrivilege { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("CAP_NET_ADMIN") && text.contains("CAP_BPF"),
            "{text}"
        );
        return;
    }
    if need_veth(test, &["setpriv"]).is_none() {
        return;
    }
    let veth = VethPair::create(test, "xu", "10.80.0.1/24");
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(&exe)
        .args([
            "--exact",
            "without_privilege_the_error_names_the_capabilities",
        ])
        .env("EBB_XDP_UNPRIVILEGED_CHILD", &veth.device)
        .output()
        .expect("run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test}: as nobody: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
