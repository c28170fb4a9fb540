// The web view's script (docs/web.md): served from /static/, never inline,
// so the pages' Content-Security-Policy can refuse inline script.
// Highlights every element of the VM under the pointer or the focus, and
// copies a <pre>'s text for its button.
function hl(vm,on){document.querySelectorAll('[data-vm]').forEach(function(e){if(e.getAttribute('data-vm')===vm){e.classList.toggle('hl',on);}});}
document.querySelectorAll('[data-vm]').forEach(function(e){var vm=e.getAttribute('data-vm');
['mouseenter','focusin'].forEach(function(t){e.addEventListener(t,function(){hl(vm,true);});});
['mouseleave','focusout'].forEach(function(t){e.addEventListener(t,function(){hl(vm,false);});});});
document.querySelectorAll('button[data-copy]').forEach(function(b){b.addEventListener('click',function(){
var t=document.getElementById(b.getAttribute('data-copy')).textContent;navigator.clipboard.writeText(t).then(function(){b.textContent='Copied';});});});
