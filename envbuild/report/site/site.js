// Copy buttons for digests: an enhancement only (without script the digest is there to select). No network.
"use strict";
document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
  button.hidden = false;
  button.addEventListener("click", function () {
    var text = button.getAttribute("data-copy");
    var done = function () { button.textContent = "copied"; };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { window.prompt("Copy:", text); });
    } else {
      window.prompt("Copy:", text);
    }
  });
});
